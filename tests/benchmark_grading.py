"""Benchmark: the sandboxed engine against plain `nbgrader autograde`, on the same submissions.

Prints two tables: for every adversarial case (tests/adversarial.py), the score each
grader gave against the honest score; and grading times for a class of 30 (one
crashing, one hanging, one malformed), the engine with 2 workers and the sandbox on.
Cases that would harm the machine under plain nbgrader (no memory or process limits)
are not run there and count as wrong. Run from the repository root:

    .venv/bin/python tests/benchmark_grading.py [cases] [timing]
"""

import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import json

from adversarial import CASES, DANGEROUS, MARKER, class_of
from aisys_grader.course import grade
from processes import leftovers
from test_grading import LIMITS, TIMEOUTS, make_course, slug, submit

PLAIN_CONFIG = f"""c = get_config()
c.CourseDirectory.course_id = "aisys"
c.Execute.timeout = {int(TIMEOUTS.cell)}
"""


def plain_nbgrader(folder: Path, cases: dict) -> tuple[dict[str, float], float]:
    """Grade `cases` with nbgrader's own autograde (checks in the student's kernel); scores and seconds."""
    course = make_course(folder)
    (course / "nbgrader_config.py").write_text(PLAIN_CONFIG)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "AISYS_GRADING_SEED": "4242"}
    nbgrader = [sys.executable, "-m", "nbgrader"]
    subprocess.run([*nbgrader, "generate_assignment", "01-architecture"], cwd=course, env=env, capture_output=True)
    for name, (make, _) in cases.items():
        target = course / "submitted" / slug(name) / "01-architecture" / "roofline.ipynb"
        target.parent.mkdir(parents=True)
        target.write_bytes(make())
    start = time.monotonic()
    subprocess.run([*nbgrader, "autograde", "01-architecture", "--create"], cwd=course, env=env, capture_output=True,
                   timeout=3600)
    seconds = time.monotonic() - start
    subprocess.run([*nbgrader, "export", "--to", "grades.csv"], cwd=course, env=env, capture_output=True)
    rows = list(csv.DictReader((course / "grades.csv").open())) if (course / "grades.csv").exists() else []
    return {row["student_id"]: float(row["score"]) for row in rows}, seconds


def kill_leftovers() -> bool:
    found = leftovers(MARKER, "aisys-grade-")
    subprocess.run(["pkill", "-9", "-f", "aisys-adversarial-marker"], capture_output=True)
    return bool(found)


def main(parts: set[str]) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="aisys-benchmark-grading-"))
    try:
        if "cases" in parts:
            adversarial_table(scratch)
        if "timing" in parts:
            timing_table(scratch)
    finally:
        # Plain nbgrader, unsandboxed, leaves the 5000-deep folder chain of one case here: deeper than
        # shutil.rmtree (TemporaryDirectory's cleanup) can recurse, so rm removes it.
        subprocess.run(["rm", "-rf", str(scratch)], check=True)


def adversarial_table(scratch: Path) -> None:
    engine = {r["student"]: r["score"] for r in grade(submit(scratch / "subs", CASES), make_course(scratch / "e"),
                                                      "01-architecture", timeouts=TIMEOUTS, limits=LIMITS,
                                                      progress=False)}
    engine_left = kill_leftovers()
    plain = {}
    for i, (name, case) in enumerate(CASES.items()):
        if name in DANGEROUS:
            plain[name] = None
            continue
        scores, _ = plain_nbgrader(scratch / f"plain{i}", {name: case})
        plain[name] = scores.get(slug(name))
        if kill_leftovers():
            plain[name] = f"{plain[name]} (left a process running)"

    print("| case | honest score | this engine | plain nbgrader |\n|---|--:|--:|--:|")
    right = {"engine": 0, "plain": 0}
    for name, (_, expected) in CASES.items():
        mine, theirs = engine.get(slug(name)), plain[name]
        right["engine"] += mine == expected
        right["plain"] += theirs == expected
        shown = "not run: no limits" if theirs is None else theirs
        print(f"| {name} | {expected:g} | {mine:g} | {shown} |")
    print(f"\nright: this engine {right['engine']}/{len(CASES)}, plain nbgrader {right['plain']}/{len(CASES)}"
          + (" (the engine left processes running!)" if engine_left else ""))


def timing_table(scratch: Path) -> None:
    cases = class_of(30)
    course = make_course(scratch / "class")
    start = time.monotonic()
    grade(submit(scratch / "class-subs", cases), course, "01-architecture", workers=2, timeouts=TIMEOUTS,
          limits=LIMITS, progress=False)
    engine_seconds = time.monotonic() - start
    per_notebook = [json.loads(p.read_text())["seconds"] for p in (course / "aisys_results").rglob("*.json")]
    honest = {k: v for k, v in cases.items() if k not in ("crashing", "hanging", "malformed")}
    _, plain_seconds = plain_nbgrader(scratch / "plain-class", cases)
    _, plain_honest_seconds = plain_nbgrader(scratch / "plain-honest", dict(list(honest.items())[:10]))
    print("\n| 30 submissions | total (s) | per notebook (s) |\n|---|--:|--:|")
    print(f"| this engine, sandbox on, 2 workers | {engine_seconds:.1f} | "
          f"median {statistics.median(per_notebook):.2f} |")
    print(f"| plain nbgrader autograde (one process) | {plain_seconds:.1f} | mean {plain_seconds / 30:.2f} |")
    print(f"| plain nbgrader, 10 well-behaved notebooks | {plain_honest_seconds:.1f} | "
          f"mean {plain_honest_seconds / 10:.2f} |")


if __name__ == "__main__":
    main(set(sys.argv[1:]) or {"cases", "timing"})
