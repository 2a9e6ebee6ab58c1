"""The grading engine end to end: the adversarial suite graded as one class on a busy machine, idempotence,
timing, no sandbox."""

import contextlib
import csv
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from adversarial import CASES, MARKER, planted
from aisys_grader import records
from aisys_grader.course import grade
from aisys_grader.engine import Timeouts
from aisys_grader.generate import source_notebook
from aisys_grader.sandbox import GIB, Limits, Sandbox, SandboxUnavailable
from notebooks import ROOT
from processes import leftovers, loaded

PROBLEM = Sandbox().problem()
needs_sandbox = pytest.mark.skipif(PROBLEM is not None and os.environ.get("AISYS_REQUIRE_SANDBOX") != "1",
                                   reason=f"needs bubblewrap (apt-get install bubblewrap): {PROBLEM}")
TIMEOUTS = Timeouts(cell=8, call=4, notebook=120)
LIMITS = Limits(address_space=2 * GIB, memory=4 * GIB, processes=64, cpu_seconds=120, scratch_bytes=256 * 2**20,
                scratch_files=20_000)


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@contextlib.contextmanager
def jobs_in(folder: Path):
    """Grading jobs' folders in a fresh folder, so that the processes of exactly these jobs can be found.

    The folder is a short one under /tmp, linked from `folder`: a kernel's ZMQ sockets live in its job
    folder, and a unix socket's path holds at most 107 bytes (pytest's own paths grow past that).
    """
    short = Path(tempfile.mkdtemp(prefix="aisys-jobs-", dir="/tmp"))
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.symlink_to(short)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tempfile, "tempdir", str(short))
            yield str(short)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def make_course(folder: Path, assignment: str = "01-architecture", notebook: str = "roofline") -> Path:
    """A course like the repository's: autograder/ in a git checkout of its own, with the repository's .gitignore.
    Its assignment is one notebook of the chapter (the adversarial suite's), so a flat class's <student>.ipynb is
    that notebook."""
    course = folder / "checkout" / "autograder"
    (course / "source" / assignment).mkdir(parents=True)
    shutil.copy(ROOT / "autograder" / "source" / assignment / f"{notebook}.ipynb", course / "source" / assignment)
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", course)
    shutil.copy(ROOT / ".gitignore", course.parent)
    git(course.parent, "init", "-q")
    git(course.parent, "add", "-A")
    git(course.parent, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "course")
    return course


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True, text=True).stdout


def submit(folder: Path, cases: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, (make, _) in cases.items():
        (folder / f"{slug(name)}.ipynb").write_bytes(make())
    return folder


@pytest.fixture(scope="module")
def adversarial(tmp_path_factory):
    """The adversarial suite, graded with two CPU-bound processes beside it: the grades must be the honest ones
    on a shared, busy machine too (time limits and timed checks count CPU seconds)."""
    folder = tmp_path_factory.mktemp("adversarial")
    course = make_course(folder)
    start = time.monotonic()
    with loaded(), jobs_in(folder / "jobs") as jobs:
        rows = grade(submit(folder / "submissions", CASES), course, "01-architecture", workers=2,
                     timeouts=TIMEOUTS, limits=LIMITS, progress=False)
    print(f"\ngraded {len(rows)} adversarial submissions in {time.monotonic() - start:.1f} s")
    return course, {row["student"]: row for row in rows}, jobs


@needs_sandbox
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_adversarial_submission_gets_the_honest_grade(adversarial, case):
    course, rows, _ = adversarial
    expected = CASES[case][1]
    assert rows[slug(case)]["score"] == expected, rows[slug(case)]
    exported = {r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open())}
    assert float(exported[slug(case)]["score"]) == expected


@needs_sandbox
@pytest.mark.slow
def test_nothing_a_submission_started_survives_grading(adversarial):
    assert leftovers(MARKER, adversarial[2]) == []


@needs_sandbox
@pytest.mark.slow
def test_no_submission_changed_the_host(adversarial):
    assert [path for path in planted() if Path(path).exists()] == []


@needs_sandbox
@pytest.mark.slow
def test_output_printed_after_hidden_checks_is_not_in_the_feedback(adversarial):
    course, rows, _ = adversarial
    page = (course / "feedback" / slug("printing the hidden calls after the last check") / "01-architecture"
            / "roofline.html").read_text()
    assert "8192, 8192, 8192" not in page and "output not shown" in page  # (8192, 8192, 8192, 'bf16') is hidden


@needs_sandbox
@pytest.mark.slow
def test_gradebook_records_seed_sandbox_and_what_went_wrong(adversarial):
    course, rows, _ = adversarial
    db = f"sqlite:///{course / 'gradebook.db'}"
    seed = records.assignment_seed(db, "01-architecture")
    runs = {s: records.recorded_run(db, "01-architecture", s, "roofline") for s in rows}
    assert all(run is not None for run in runs.values())
    assert len({run.seed for run in runs.values()}) == len(runs), "each student gets their own hidden inputs"
    assert all(int(run.seed) == records.notebook_seed(seed, s, "roofline", run.submission_sha256)
               for s, run in runs.items())
    report = json.loads(runs[slug("os._exit mid-notebook")].report)
    assert "bubblewrap" in report["enforced"]["sandbox"] and "NOT" not in report["enforced"]["processes"]
    assert any("kernel ended" in note for note in report["notes"])
    assert any("not a readable notebook" in n for n in json.loads(runs[slug("invalid JSON")].report)["notes"])
    forged = json.loads(runs[slug("IOPub messages with a bad signature")].report)["notes"]
    assert any("failed their signature check" in n for n in forged), forged
    assert (course / "submitted" / slug("invalid JSON") / "01-architecture" / "roofline.ipynb.received").exists()


@needs_sandbox
@pytest.mark.slow
def test_feedback_never_shows_hidden_checks(adversarial):
    course, rows, _ = adversarial
    check_source = (ROOT / "solutions" / "01-architecture" / "roofline" / "checks.py").read_text()
    secret_lines = [line.strip() for line in check_source.splitlines() if len(line.strip()) > 30]
    for student in rows:
        page = (course / "feedback" / student / "01-architecture" / "roofline.html").read_text()
        assert "hidden=True" not in page and "BEGIN HIDDEN" not in page
        assert not [line for line in secret_lines if line in page]


@needs_sandbox
@pytest.mark.slow
def test_grading_leaves_nothing_for_git_to_pick_up(adversarial):
    """Notebooks, results, seeds and feedback of students are runtime output: .gitignore keeps them out of commits."""
    course = adversarial[0]
    assert (course / "aisys_results").is_dir() and (course / "gradebook.db").is_file()
    assert git(course.parent, "status", "--porcelain", "--untracked-files=all") == ""


@needs_sandbox
@pytest.mark.slow
def test_regrading_redoes_only_what_changed(adversarial, tmp_path):
    course, rows, _ = adversarial
    results = sorted((course / "aisys_results").rglob("*.json"))
    before = {p: p.stat().st_mtime_ns for p in results}
    submissions = submit(tmp_path / "again", {"honest solution": CASES["honest solution"],
                                              "wrong solution": CASES["honest solution"]})  # bob fixed his work
    summary = grade(submissions, course, "01-architecture", workers=2, timeouts=TIMEOUTS, limits=LIMITS,
                    progress=False)
    again = {r["student"]: r for r in summary}
    assert summary.unchanged == 1, "the honest solution is not graded again, and the command says so"
    changed = [p for p in results if p.stat().st_mtime_ns != before[p]]
    assert [p.parent.name for p in changed] == [slug("wrong solution")]
    assert again[slug("wrong solution")]["score"] == 7 and again[slug("honest solution")]["score"] == 7


@needs_sandbox
@pytest.mark.slow
def test_an_interrupted_run_loses_nothing_and_the_next_one_finishes(tmp_path, monkeypatch):
    import aisys_grader.course as course_module

    course = make_course(tmp_path)
    cases = {name: CASES["honest solution"] for name in ("ann", "ben", "cat")}
    submissions = submit(tmp_path / "subs", cases)
    real = course_module.grade_submission

    def interrupted(course_dir, assignment, student, *args, **kwargs):
        if student == "cat":
            raise KeyboardInterrupt  # Ctrl-C, or the machine going down, mid-run
        return real(course_dir, assignment, student, *args, **kwargs)

    monkeypatch.setattr(course_module, "grade_submission", interrupted)
    with pytest.raises(KeyboardInterrupt):
        grade(submissions, course, "01-architecture", workers=1, timeouts=TIMEOUTS, limits=LIMITS, progress=False)
    saved = {p.parent.name: p.stat().st_mtime_ns for p in (course / "aisys_results").rglob("*.json")}
    assert set(saved) == {"ann", "ben"}

    monkeypatch.setattr(course_module, "grade_submission", real)
    rows = {r["student"]: r["score"] for r in grade(submissions, course, "01-architecture", timeouts=TIMEOUTS,
                                                    limits=LIMITS, progress=False)}
    assert rows == {"ann": 7, "ben": 7, "cat": 7}
    assert all((course / "aisys_results" / "01-architecture" / s / "roofline.json").stat().st_mtime_ns == t
               for s, t in saved.items()), "finished work was graded again"


@needs_sandbox
@pytest.mark.slow
def test_timed_check_uses_fresh_inputs_so_memoising_does_not_pay(tmp_path):
    """On a busy machine too: both sides are timed in CPU seconds."""
    course = tmp_path / "course"
    notebook = course / "source" / "99-grader" / "timing.ipynb"
    notebook.parent.mkdir(parents=True)
    nbformat.write(source_notebook("99-grader/timing"), notebook)
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", course)
    # Right, and some 100 times numpy's time: far over the check's budget, far under the call's time limit.
    slow_sort = ("def sort_values(x):\n    values = list(x)\n    for _ in range(300):\n"
                 "        result = sorted(values)\n    return np.array(result)\n")
    memoised = slow_sort.replace("def sort_values(x):", "def _slow(x):") + (
        "_memo = {}\ndef sort_values(x):\n    key = x.tobytes()\n"
        "    if key not in _memo: _memo[key] = _slow(x)\n    return _memo[key]\n")

    def submission(code):
        nb = nbformat.read(notebook, as_version=4)
        next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")).source = code
        return lambda: nbformat.writes(nb).encode()

    cases = {"fast": (submission("def sort_values(x):\n    return np.sort(x)\n"), 2),
             "memoising": (submission(memoised), 1), "slow": (submission(slow_sort), 1)}
    with loaded():
        rows = {r["student"]: r for r in grade(submit(tmp_path / "subs", cases), course, "99-grader",
                                               timeouts=TIMEOUTS, limits=LIMITS, progress=False)}
    db = f"sqlite:///{course / 'gradebook.db'}"
    reports = {name: json.loads(records.recorded_run(db, "99-grader", name, "timing").report) for name in cases}
    for name, (_, expected) in cases.items():
        assert rows[name]["score"] == expected, reports[name]["checks"]
    for name in ("memoising", "slow"):
        assert "too slow" in next(c["message"] for c in reports[name]["checks"] if c["name"] == "sorts_fast")


@needs_sandbox
@pytest.mark.slow
def test_a_zip_in_nbgrader_layout_is_graded_and_an_unsafe_zip_refused(tmp_path):
    course = make_course(tmp_path)
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for student, (make, _) in (("ada", CASES["honest solution"]), ("bob", CASES["wrong solution"])):
            zipped.writestr(f"submitted/{student}/01-architecture/roofline.ipynb", make())
    rows = {r["student"]: r["score"] for r in grade(archive, course, "01-architecture", timeouts=TIMEOUTS,
                                                    limits=LIMITS, progress=False)}
    assert rows == {"ada": 7, "bob": 0}
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as zipped:
        zipped.writestr("../../escaped.ipynb", b"{}")
    with pytest.raises(ValueError, match="unsafe path"):
        grade(tmp_path / "evil.zip", course, "01-architecture", progress=False)


def test_grading_refuses_without_bubblewrap_unless_asked(monkeypatch):
    monkeypatch.setenv("AISYS_BWRAP", "/nonexistent/bwrap")
    with pytest.raises(SandboxUnavailable, match="does not start.*--unsandboxed"):
        Sandbox.create()
    unsafe = Sandbox.create(allow_unsandboxed=True)
    assert not unsafe.sandboxed
    assert unsafe.enforced()["sandbox"].startswith("NONE")


@needs_sandbox
def test_a_result_larger_than_a_cells_output_limit_still_crosses_the_bridge():
    """A 12 MB array (a 2000 x 1500 transpose, say) is a bridge reply, not cell output to cut."""
    from aisys_grader.kernel import OUTPUT_LIMIT, KernelStudent, SandboxedKernel
    from aisys_grader.sandbox import Sandbox

    with SandboxedKernel(Sandbox.create()) as kernel:
        kernel.execute("import numpy as np\ndef big(n):\n    return np.arange(n, dtype=np.float32)", 60)
        value = KernelStudent(kernel).call("big", 3_000_000, returns="array")
    assert value.nbytes > 10 * OUTPUT_LIMIT and value[-1] == 2_999_999
