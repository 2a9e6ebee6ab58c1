"""Limits that hold: the notebook's time limit cuts the work in flight, and a job gets its CPU share whoever is
graded beside it. (The adversarial suite itself runs on a loaded machine: test_grading.py.)"""

import json
import os
import time

import pytest

from adversarial import EXERCISE, HANDOUT, as_bytes, honest, insert_cell, replace_answer
from aisys_grader.autograde import read_submission
from aisys_grader.course import grade
from aisys_grader.engine import Timeouts, grade_notebook
from aisys_grader.sandbox import Sandbox
from test_grading import LIMITS, TIMEOUTS, jobs_in, make_course, needs_sandbox, submit

BURN = ("import time\n\ndef _burn(seconds):\n    end = time.process_time() + seconds\n"
        "    while time.process_time() < end:\n        pass\n")


def _burning(function: str, seconds: float, code: str) -> str:
    """The honest answer cell `code`, with `function` made to burn `seconds` of CPU on every call."""
    return code + f"\n_{function} = {function}\n\ndef {function}(*args, **kwargs):\n    _burn({seconds})\n" \
                  f"    return _{function}(*args, **kwargs)\n"


def _answer(name: str) -> str:
    from adversarial import HONEST_ANSWER

    return HONEST_ANSWER[name]


@needs_sandbox
def test_the_notebook_limit_cuts_the_calls_in_flight(tmp_path):
    """Every call stays under the call limit, but together they run far past the notebook's: grading stops
    at the notebook's limit, not after every call has had its own (which took some 80 s and gave full marks)."""
    notebook = insert_cell(honest(), BURN)
    for function in ("bytes_per_element", "gemm_cost", "elementwise_cost", "softmax_cost"):
        notebook = replace_answer(notebook, function, _burning(function, 1.0, _answer(function)))
    path = tmp_path / "submission.ipynb"
    path.write_bytes(as_bytes(notebook))
    timeouts = Timeouts(cell=8, call=4, notebook=10)
    start = time.monotonic()
    graded = grade_notebook(EXERCISE, HANDOUT, read_submission(path), seed=1, sandbox=Sandbox.create(limits=LIMITS),
                            timeouts=timeouts)
    seconds = time.monotonic() - start
    assert any("ran past its limit of 10" in note for note in graded.notes), graded.notes
    assert graded.score < 7
    assert seconds < 10 * timeouts.wall_factor + 20, f"grading took {seconds:.0f} s"
    cut = [c for c in graded.checks.values() if not c.passed]
    assert all("ran past its limit" in c.message for c in cut), [c.message for c in cut]


# Each in a session of its own: the scheduler's per-session groups (autogroup) would otherwise share them out.
SPINNERS = ("import subprocess, sys\n_spinners = [subprocess.Popen([sys.executable, '-c', 'while True: pass'],"
            " start_new_session=True) for _ in range(50)]\n")
WAIT = "import time\ntime.sleep(5)"  # four of them: the spinners outlive the careful student's grading


@needs_sandbox
@pytest.mark.slow
def test_a_classmate_spinning_fifty_processes_changes_no_grade(tmp_path):
    """Graded at the same time as a submission that keeps 50 processes spinning, a correct submission whose
    calls need half a CPU second each still passes every check: its job has a CPU share of its own."""
    slow_but_right = replace_answer(insert_cell(honest(), BURN), "bytes_per_element",
                                    _burning("bytes_per_element", 0.5, _answer("bytes_per_element")))
    spinner = honest()
    for _ in range(4):
        spinner = insert_cell(spinner, WAIT)
    spinner = insert_cell(spinner, SPINNERS)
    cases = {"spinner": (lambda: as_bytes(spinner), None), "careful": (lambda: as_bytes(slow_but_right), 7)}
    course = make_course(tmp_path)
    with jobs_in(tmp_path / "jobs"):
        rows = {r["student"]: r for r in grade(submit(tmp_path / "subs", cases), course, "01-architecture",
                                               workers=2, timeouts=TIMEOUTS, limits=LIMITS, progress=False)}
    from aisys_grader import records

    report = json.loads(records.recorded_run(f"sqlite:///{course / 'gradebook.db'}", "01-architecture", "careful",
                                             "roofline").report)
    assert rows["careful"]["score"] == 7, report["checks"]
    if os.geteuid() == 0:  # where cgroups can be made: CI, course servers
        assert "cpu cgroup" in report["enforced"]["cpu"], report["enforced"]
