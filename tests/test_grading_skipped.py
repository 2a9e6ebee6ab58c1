"""Checks that cannot run here (GPU-only checks without a GPU) are skipped: never passed, never failed, never graded.

From the check library (`CheckSkipped`, `require_gpu`, `run`) through the notebook's
`check(...)` to the grading engine and a whole class run with nbgrader: a notebook with a
skipped check gets no grade, not even 0, and a grade it had stays. The fixture exercise
99-grader/needs_gpu has one ordinary check and one that calls `require_gpu()`; tests grade
"without a GPU" with AISYS_DEVICE=cpu and pretend to have one with AISYS_TEST_GPU=1.
"""

import json
import shutil

import nbformat
import pytest
from nbgrader.api import Gradebook

from aisys_grader import CheckFailure, CheckSkipped, InProcessStudent, Result, check, checker, checks_for, run
from aisys_grader import autograde, cli, require_gpu
from aisys_grader.course import grade
from aisys_grader.engine import Timeouts, grade_notebook
from aisys_grader.generate import source_notebook
from aisys_grader.sandbox import Sandbox
from notebooks import ROOT

EXERCISE = "99-grader/needs_gpu"
NEEDS_GPU = "99-grader/needs_gpu needs a GPU to grade: run aisys-grader on a machine with a GPU"
TIMEOUTS = Timeouts(cell=20, call=10, notebook=120)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setenv("AISYS_DEVICE", "cpu")
    monkeypatch.delenv("AISYS_TEST_GPU", raising=False)


@pytest.fixture
def pretend_gpu(monkeypatch):
    monkeypatch.setenv("AISYS_TEST_GPU", "1")


@check(points=2, exercise="tests/skipping")
def gpu_only(student, rng, hidden):
    require_gpu()
    student.call("f", returns="number")


# The check library ---------------------------------------------------------------------------------------------------

def test_a_skipped_check_neither_passes_nor_fails_and_scores_nothing(no_gpu):
    calls = []
    result = run(checks_for("tests/skipping")["gpu_only"], InProcessStudent({"f": lambda: calls.append(1) or 1}),
                 hidden=False)
    assert result.skipped and not result.passed and not result.failed and result.score == 0
    assert result.message == "skipped: needs a GPU (AISYS_DEVICE=cpu)"
    assert calls == [], "a skipped check must not call student code"


def test_a_result_is_not_both_passed_and_skipped():
    with pytest.raises(ValueError, match="passed or skipped"):
        Result(checks_for("tests/skipping")["gpu_only"], False, True, "", skipped=True)


def test_student_code_cannot_skip_a_check(monkeypatch):
    monkeypatch.setattr("aisys.device.current", lambda: "cuda")  # require_gpu lets the check go on

    def sneaky():
        raise CheckSkipped("needs a GPU")

    result = run(checks_for("tests/skipping")["gpu_only"], InProcessStudent({"f": sneaky}), hidden=False)
    assert result.failed and "raised CheckSkipped" in result.message


@pytest.mark.parametrize("setting, gpu, cupy_problem, message", [
    ("cpu", True, None, "needs a GPU (AISYS_DEVICE=cpu)"),
    ("auto", False, None, "needs a GPU (no CUDA GPU found)"),
    ("cuda", False, None, "needs a GPU (AISYS_DEVICE=cuda, but torch sees no CUDA GPU"),
    ("auto", True, "CuPy is not installed", "needs a GPU with CuPy (CuPy is not installed)"),
])
def test_require_gpu_says_what_is_missing(monkeypatch, setting, gpu, cupy_problem, message):
    monkeypatch.setenv("AISYS_DEVICE", setting)
    monkeypatch.setattr("aisys.device.gpu_available", lambda: gpu)
    monkeypatch.setattr("aisys.cuda_c.cupy_problem", lambda: cupy_problem)
    with pytest.raises(CheckSkipped) as skipped:
        require_gpu(cupy=True)
    assert str(skipped.value).startswith(message)


def test_require_gpu_passes_where_a_gpu_and_cupy_are(monkeypatch):
    monkeypatch.setenv("AISYS_DEVICE", "auto")
    monkeypatch.setattr("aisys.device.gpu_available", lambda: True)
    monkeypatch.setattr("aisys.cuda_c.cupy_problem", lambda: None)
    require_gpu(cupy=True)


def test_the_notebook_prints_skipped_and_goes_on(no_gpu, capsys):
    check_here = checker("tests/skipping", {"f": lambda: 1})
    check_here("gpu_only")
    check_here("gpu_only", hidden=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["skipped: needs a GPU (AISYS_DEVICE=cpu): gpu_only (visible cases) not checked",
                     "skipped: needs a GPU (AISYS_DEVICE=cpu): gpu_only (hidden cases) not checked"]


def test_the_notebook_still_raises_on_a_failure(pretend_gpu):
    with pytest.raises(CheckFailure, match="expected 14, got 15"):
        checker(EXERCISE, {"double": lambda x: 2 * x + 1})("doubles_on_gpu")


# The grading engine --------------------------------------------------------------------------------------------------

def _source():
    return source_notebook(EXERCISE)


def _with_answer(code: str):
    notebook = _source()
    next(c for c in notebook.cells if c.metadata["nbgrader"].get("solution")).source = code
    return notebook


def _grade(submission):
    return grade_notebook(EXERCISE, _source(), submission, seed=1, sandbox=Sandbox.create(allow_unsandboxed=True),
                          timeouts=TIMEOUTS)


def _outputs(notebook, name):
    return next(c.outputs for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == name)


def test_engine_marks_skipped_checks_and_their_cells(no_gpu):
    graded = _grade(_source())
    assert graded.skipped == ["doubles_on_gpu"]
    assert graded.checks["doubles"].passed and graded.score == 1
    [output] = _outputs(graded.notebook, "doubles_on_gpu")
    assert output.output_type == "stream" and output.name == "stdout"  # not an error: nbgrader would score it 0
    assert output.text == "skipped: needs a GPU (AISYS_DEVICE=cpu): doubles_on_gpu not graded\n"


def test_engine_grades_gpu_checks_where_there_is_a_gpu(pretend_gpu):
    graded = _grade(_with_answer("def double(x):\n    return 2 * x + (x == 7)\n"))
    assert graded.skipped == [] and graded.checks["doubles"].passed
    on_gpu = graded.checks["doubles_on_gpu"]
    # graded after `doubles` passed hidden data to the code: the message shows how far off, not the values
    assert not on_gpu.passed and not on_gpu.skipped and "differs from the reference" in on_gpu.message


def test_a_gpu_check_is_skipped_even_after_the_kernel_died(no_gpu):
    graded = _grade(_with_answer("import os\nos._exit(3)\n"))
    assert graded.skipped == ["doubles_on_gpu"]
    assert graded.checks["doubles"].message.startswith("not graded: the kernel ended")


# Results and the class run -------------------------------------------------------------------------------------------

def _course(tmp_path):
    course = tmp_path / "course"
    (course / "source" / "99-grader").mkdir(parents=True)
    nbformat.write(_source(), course / "source" / "99-grader" / "needs_gpu.ipynb")
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", course)
    return course


def test_a_skipped_run_is_saved_apart_and_leaves_a_graded_result_alone(tmp_path, monkeypatch):
    course = _course(tmp_path)
    release = course / "release" / "99-grader" / "needs_gpu.ipynb"
    release.parent.mkdir(parents=True)
    shutil.copy(course / "source" / "99-grader" / "needs_gpu.ipynb", release)
    submitted = autograde.submitted_path(course, "99-grader", "ada", "needs_gpu")
    submitted.parent.mkdir(parents=True)
    shutil.copy(release, submitted)
    graded, skipped = (autograde.result_path(course, "99-grader", "ada", "needs_gpu"),
                       autograde.skipped_path(course, "99-grader", "ada", "needs_gpu"))

    def grade_it():
        return autograde.grade_submission(course, "99-grader", "ada", "needs_gpu", assignment_seed=5,
                                          sandbox=Sandbox.create(allow_unsandboxed=True), timeouts=TIMEOUTS)

    monkeypatch.setenv("AISYS_DEVICE", "cpu")
    assert grade_it()["skipped"] == ["doubles_on_gpu"]
    assert skipped.exists() and not graded.exists()
    assert autograde.cached_result(course, "99-grader", "ada", "needs_gpu", 5) is None  # so the next run grades it
    assert autograde.cached_result(course, "99-grader", "ada", "needs_gpu", 5, skipped=True)["skipped"]

    monkeypatch.setenv("AISYS_TEST_GPU", "1")
    assert grade_it()["score"] == 3
    assert graded.exists() and not skipped.exists()
    before = graded.read_bytes()

    monkeypatch.delenv("AISYS_TEST_GPU")
    assert grade_it()["skipped"]
    assert graded.read_bytes() == before and skipped.exists()
    assert autograde.cached_result(course, "99-grader", "ada", "needs_gpu", 5, skipped=True)["score"] == 3


def _gradebook_scores(course, student):
    """nbgrader's auto_score of each graded cell of the student's needs_gpu notebook."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {name: gradebook.find_grade(name, "needs_gpu", "99-grader", student).auto_score
                for name in checks_for(EXERCISE)}


@pytest.mark.slow
def test_a_class_run_without_a_gpu_records_nothing_and_one_with_a_gpu_grades(tmp_path, monkeypatch, capsys):
    course = _course(tmp_path)
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    nbformat.write(_source(), submissions / "ada.ipynb")
    db = f"sqlite:///{course / 'gradebook.db'}"

    def grade_class(force=False):
        rows = grade(submissions, course, "99-grader", workers=1, force=force, allow_unsandboxed=True,
                     timeouts=TIMEOUTS, progress=False)
        return rows[0]

    monkeypatch.setenv("AISYS_DEVICE", "cpu")
    row = grade_class()
    assert row["needs_gpu"] == [EXERCISE] and NEEDS_GPU in row["notes"]
    assert (row["score"], row["max_score"]) == (0, 0)  # nothing graded, so nothing counted
    assert _gradebook_scores(course, "ada") == {"doubles": None, "doubles_on_gpu": None}, "no 0 may be recorded"
    assert autograde.records.recorded_run(db, "99-grader", "ada", "needs_gpu") is None
    assert not (course / "feedback" / "ada" / "99-grader" / "needs_gpu.html").exists()
    assert grade_class()["needs_gpu"] == [EXERCISE], "the next run without a GPU says so again"

    monkeypatch.setenv("AISYS_TEST_GPU", "1")  # a machine with a GPU
    row = grade_class()
    assert row["needs_gpu"] == [] and (row["score"], row["max_score"]) == (3, 3)
    assert _gradebook_scores(course, "ada") == {"doubles": 1, "doubles_on_gpu": 2}
    assert (course / "feedback" / "ada" / "99-grader" / "needs_gpu.html").exists()

    monkeypatch.delenv("AISYS_TEST_GPU")  # regrading everything without a GPU keeps the grade
    row = grade_class(force=True)
    assert row["needs_gpu"] == [] and row["score"] == 3
    assert _gradebook_scores(course, "ada") == {"doubles": 1, "doubles_on_gpu": 2}
    assert json.loads(autograde.records.recorded_run(db, "99-grader", "ada", "needs_gpu").report)["checks"][1]["passed"]


def test_the_grade_command_says_which_exercises_need_a_gpu(monkeypatch, capsys, tmp_path):
    rows = [{"student": "ada", "score": 0, "max_score": 0, "notes": NEEDS_GPU, "needs_gpu": [EXERCISE]},
            {"student": "bob", "score": 0, "max_score": 0, "notes": NEEDS_GPU, "needs_gpu": [EXERCISE]}]
    monkeypatch.setattr("aisys_grader.course.grade", lambda *args, **kwargs: rows)
    assert cli.main(["grade", str(tmp_path), "--assignment", "99-grader"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"{NEEDS_GPU} (2 submissions not graded, nothing recorded for them)"


@pytest.mark.parametrize("count, skipped", [(1, True), (2, False), (4, False)])
def test_require_gpu_counts_gpus_for_collectives(monkeypatch, count, skipped):
    monkeypatch.setenv("AISYS_DEVICE", "auto")
    monkeypatch.setattr("aisys.device.gpu_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: count)
    if skipped:
        with pytest.raises(CheckSkipped, match=r"needs 2 GPUs \(found 1\)"):
            require_gpu(gpus=2)
    else:
        require_gpu(gpus=2)


# Optional checks (speed checks): without a GPU the notebook is graded without them -----------------------------------

OPTIONAL = "99-grader/optional_on_gpu"


def test_require_gpu_says_whether_the_skip_is_optional(no_gpu):
    for optional in (False, True):
        with pytest.raises(CheckSkipped) as skipped:
            require_gpu(optional=optional)
        assert skipped.value.optional is optional
    result = run(checks_for(OPTIONAL)["doubles_on_gpu"], InProcessStudent({"double": lambda x: 2 * x}), hidden=False)
    assert result.skipped and result.optional and result.record()["optional"]
    with pytest.raises(ValueError, match="only a skipped check result is optional"):
        Result(result.check, False, False, "", optional=True)


def _grade_optional():
    source = source_notebook(OPTIONAL)
    return grade_notebook(OPTIONAL, source, source, seed=1, sandbox=Sandbox.create(allow_unsandboxed=True),
                          timeouts=TIMEOUTS)


def test_an_optional_check_skipped_leaves_the_notebook_graded_without_its_points(no_gpu):
    graded = _grade_optional()
    assert graded.skipped == [] and graded.left_out == ["doubles_on_gpu"]
    assert (graded.score, graded.max_score) == (1, 1)
    assert graded.notes[-1] == ("not graded on this machine: doubles_on_gpu (skipped: needs a GPU (AISYS_DEVICE=cpu)); "
                                "their 2 points are left out of the score and its maximum")
    [output] = _outputs(graded.notebook, "doubles_on_gpu")
    assert output.output_type == "stream" and output.text == (
        "skipped: needs a GPU (AISYS_DEVICE=cpu): doubles_on_gpu not graded; its points are left out of this grade\n")


def test_an_optional_check_counts_where_there_is_a_gpu(pretend_gpu):
    graded = _grade_optional()
    assert graded.left_out == [] and (graded.score, graded.max_score) == (3, 3)


@pytest.mark.slow
def test_a_class_run_without_a_gpu_records_the_rest_and_no_score_for_an_optional_check(tmp_path, monkeypatch):
    course = tmp_path / "course"
    (course / "source" / "99-grader").mkdir(parents=True)
    nbformat.write(source_notebook(OPTIONAL), course / "source" / "99-grader" / "optional_on_gpu.ipynb")
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", course)
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    nbformat.write(source_notebook(OPTIONAL), submissions / "ada.ipynb")

    def grade_class(force=False):
        return grade(submissions, course, "99-grader", workers=1, force=force, allow_unsandboxed=True,
                     timeouts=TIMEOUTS, progress=False)[0]

    def scores():
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            return {name: gradebook.find_grade(name, "optional_on_gpu", "99-grader", "ada").auto_score
                    for name in checks_for(OPTIONAL)}

    monkeypatch.setenv("AISYS_DEVICE", "cpu")
    row = grade_class()
    assert row["needs_gpu"] == [] and (row["score"], row["max_score"]) == (1, 1) and "left out" in row["notes"]
    assert scores() == {"doubles": 1, "doubles_on_gpu": None}, "no score, neither full marks nor 0, where it never ran"
    monkeypatch.setenv("AISYS_TEST_GPU", "1")
    row = grade_class(force=True)
    assert (row["score"], row["max_score"]) == (3, 3) and scores() == {"doubles": 1, "doubles_on_gpu": 2}
