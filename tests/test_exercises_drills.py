"""The generic exercise tests of test_exercises.py (solution, blank notebook, graded cells, known-wrong answers), for
the interview drills of chapter 9: a file of their own, so that pytest-xdist (--dist loadfile) runs them on one
worker while the chapters' exercises run on the other."""

from notebooks import EXERCISES
from test_exercises import *  # noqa: F403 (the tests, and pytest_generate_tests, which reads TESTED below)

TESTED = [e for e in EXERCISES if e.startswith("09-drills/")]
