"""A hostile class end to end: what one student puts in the input never costs another a grade.

Each class is graded once through `course.grade` with the real sandbox: honest students beside
submissions that try to replace or hide a classmate's work (a copy of bob inside mallory's folder,
a nested path in a flat class, links to the course's solution), that break the grader (a worker
error, an nbgrader failure, malformed metadata, lone surrogates, odd student names, an oversized
file) or that print markup for the feedback page. Every honest student ends with full marks in the
summary, the gradebook, grades.csv and feedback; the rest are graded as the blank or reported as
not graded, with the reason. Fast tests of the same intake rules are in test_intake.py.
"""

import csv
import html.parser
import json
import os

import nbformat
import pytest

from adversarial import FULL, as_bytes, honest, insert_cell, wrong
from aisys_grader.course import grade
from test_grading import LIMITS, TIMEOUTS, jobs_in, make_course, needs_sandbox

ASSIGNMENT = "01-architecture"
FORMULA = '=HYPERLINK("x","y")'
GARBAGE = b'\xff\xfe{"cells": [not json'
XSS = '''
from IPython.display import HTML, SVG, Javascript, Markdown, display, publish_display_data
print('<script>alert("xss-stream")</script>')
display(HTML('<script>alert("xss-html")</script><img src=x onerror="alert(1)" alt="xss-html-img">'))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert("xss-svg")</script></svg>'))
display(Javascript('alert("xss-js")'))
display(Markdown('<img src=x onerror="alert(1)" alt="xss-markdown">'))
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
publish_display_data({"image/png": PNG}, metadata={"image/png": {"width": "1 onerror=alert('xss-meta')"}})
publish_display_data({"image/png": PNG}, metadata={"width": "1 onerror=alert('xss-meta2')"})
publish_display_data({"image/png": 'x" onerror="alert(1)" alt="xss-base64'})
'''


def _with_cells(*cells: dict, **metadata) -> bytes:
    """The honest notebook with extra cells and notebook metadata, as raw JSON (nbformat would refuse them)."""
    notebook = json.loads(as_bytes(honest()))
    notebook["metadata"].update(metadata)
    notebook["cells"] += [{"cell_type": "code", "metadata": m, "source": s, "outputs": [], "execution_count": None}
                          for m, s in cells]
    return json.dumps(notebook).encode()


def _invalid_metadata() -> bytes:
    """nbgrader metadata of the wrong type and an extra cell with invalid nbgrader metadata."""
    return _with_cells(({"nbgrader": {"grade": True, "solution": "yes", "points": "many"}}, "y = 2"),
                       ({"nbgrader": 5}, "z = 3"), aisys=3)


def _lone_surrogate() -> bytes:
    notebook = insert_cell(honest(), "note = 'a lone surrogate: \\udc80'\nprint('\\udc81', note)", "bound")
    text = as_bytes(notebook).decode()
    return text.replace("a lone surrogate: \\\\udc80", "a lone surrogate: \\udc80").encode()


def _place(folder, student: str, data: bytes | None = None, link: str | None = None):
    path = folder / student / ASSIGNMENT / "roofline.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    if link is not None:
        path.symlink_to(link)
    else:
        path.write_bytes(data)
    return path


class Markup(html.parser.HTMLParser):
    """Where a marker appears in a page: in markup (tags, attributes, script, style, comments) or in text."""

    def __init__(self, marker: str):
        super().__init__(convert_charrefs=True)
        self.marker, self.in_markup, self.in_text, self.raw = marker, [], [], []

    def handle_starttag(self, tag, attrs):
        self.raw.append(tag)
        if self.marker in tag or any(self.marker in f"{k}={v}" for k, v in attrs):
            self.in_markup.append(self.get_starttag_text())

    def handle_endtag(self, tag):
        if self.raw and self.raw[-1] == tag:
            self.raw.pop()

    def handle_data(self, data):
        if self.marker in data:
            (self.in_markup if self.raw and self.raw[-1] in ("script", "style") else self.in_text).append(data)

    def handle_comment(self, data):
        if self.marker in data:
            self.in_markup.append(data)


def markup_holding(page: str, marker: str) -> tuple[list[str], list[str]]:
    parser = Markup(marker)
    parser.feed(page)
    return parser.in_markup, parser.in_text


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory):
    """A class in nbgrader's layout, graded once; the grader is made to fail for `wex` (a worker error) and
    `nbf` (nbgrader's autograde)."""
    import aisys_grader.course as course_module
    from nbgrader.apps import NbGraderAPI

    folder = tmp_path_factory.mktemp("hostile")
    course = make_course(folder)
    solution = course / "source" / ASSIGNMENT / "roofline.ipynb"
    subs = folder / "class"
    for student in ("ada", "bob", "wex", "nbf", FORMULA):
        _place(subs, student, as_bytes(honest()))
    (subs / "ada" / ASSIGNMENT / "timestamp.txt").write_text("2026-11-20 09:30:00.5 UTC")  # as nbgrader collect
    os.utime(subs / "bob" / ASSIGNMENT / "roofline.ipynb", (0, 1_763_631_000))  # 2025-11-20 09:30:00 UTC
    _place(subs, "mallory", as_bytes(wrong()))
    (subs / "mallory" / "bob" / ASSIGNMENT).mkdir(parents=True)
    (subs / "mallory" / "bob" / ASSIGNMENT / "roofline.ipynb").write_bytes(as_bytes(wrong()))  # bob's, she hopes
    _place(subs, "eve", link=str(solution))  # a link to the course's source notebook: the solution
    elsewhere = folder / "elsewhere" / "fay"
    _place(folder / "elsewhere", "fay", solution.read_bytes())
    (subs / "fay").symlink_to(elsewhere)  # a linked student folder
    _place(subs, "new\nline", as_bytes(honest()))
    _place(subs, "bell\x07", as_bytes(honest()))
    _place(subs, "big", as_bytes(honest()) + b" " * (64 * 2**20))  # valid JSON, but over the size limit
    _place(subs, "garbage", GARBAGE)
    _place(subs, "meta", _invalid_metadata())
    _place(subs, "gid-list", _with_cells(({"nbgrader": {"grade_id": ["a", "list"], "solution": True}}, "x = 1")))
    _place(subs, "surrogate", _lone_surrogate())
    _place(subs, "xss", as_bytes(insert_cell(honest(), XSS)))  # before any check: feedback shows its output

    real_grade, real_autograde = course_module.grade_submission, NbGraderAPI.autograde

    def grade_submission(course_dir, assignment, student, *args, **kwargs):
        if student == "wex":
            raise OSError("the grader broke here")
        return real_grade(course_dir, assignment, student, *args, **kwargs)

    def autograde(self, assignment, student, *args, **kwargs):
        if student == "nbf":
            return {"success": False, "log": "[AutogradeApp | ERROR] it broke", "error": "ValueError: it broke"}
        return real_autograde(self, assignment, student, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch, jobs_in(folder / "jobs"):
        patch.setattr(course_module, "grade_submission", grade_submission)
        patch.setattr(NbGraderAPI, "autograde", autograde)
        summary = grade(subs, course, ASSIGNMENT, workers=2, timeouts=TIMEOUTS, limits=LIMITS, progress=False)
    return course, summary


def _exported(course) -> dict:
    return {r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open(newline=""))}


HONEST = ("ada", "bob", FORMULA, "meta", "gid-list", "surrogate", "xss")


@needs_sandbox
@pytest.mark.slow
def test_every_honest_student_gets_full_marks_in_summary_gradebook_csv_and_feedback(hostile_class):
    course, summary = hostile_class
    rows = {r["student"]: r for r in summary}
    exported = _exported(course)
    for student in HONEST:
        assert rows[student]["score"] == FULL and not rows[student]["not_graded"], rows[student]
        assert float(exported["'" + student if student == FORMULA else student]["score"]) == FULL
        assert (course / "feedback" / student / ASSIGNMENT / "roofline.html").exists()
    # when they submitted, for late penalties: nbgrader's timestamp.txt, else the file's time (the summary says which)
    assert (exported["ada"]["timestamp"], rows["ada"]["submitted_from"]) == ("2026-11-20 09:30:00.500000",
                                                                              "timestamp.txt")
    assert (exported["bob"]["timestamp"], rows["bob"]["submitted_from"]) == (
        "2025-11-20 09:30:00", "the notebook file's modification time")
    assert summary.written["grades"] == course / "grades.csv" and summary.unchanged == 0


@needs_sandbox
@pytest.mark.slow
def test_a_copy_of_bob_in_mallorys_folder_is_reported_and_never_used(hostile_class):
    course, summary = hostile_class
    rows = {r["student"]: r for r in summary}
    assert rows["bob"]["score"] == FULL and rows["mallory"]["score"] == 0
    assert "mallory/bob" in rows["mallory"]["notes"]
    assert ("mallory/bob", "mallory") in {(r.path, r.student) for r in summary.refused}
    assert summary.layout == "nbgrader"


@needs_sandbox
@pytest.mark.slow
def test_links_to_the_solution_are_refused(hostile_class):
    course, summary = hostile_class
    rows = {r["student"]: r for r in summary}
    assert rows["eve"]["score"] == 0 and "symbolic link" in rows["eve"]["notes"]
    assert "fay" not in rows and any(r.path == "fay" and "symbolic link" in r.reason for r in summary.refused)
    assert "fay" not in _exported(course)


@needs_sandbox
@pytest.mark.slow
def test_odd_names_and_oversized_or_unreadable_notebooks_are_reported(hostile_class):
    course, summary = hostile_class
    rows = {r["student"]: r for r in summary}
    assert "newline" in rows[repr("new\nline")]["not_graded"]
    assert "control or invisible character" in rows[repr("bell\x07")]["not_graded"]
    assert not (course / "submitted" / "new\nline").exists() and not (course / "submitted" / "bell\x07").exists()
    assert rows["big"]["score"] == 0 and "MiB" in rows["big"]["notes"]
    assert rows["garbage"]["score"] == 0 and "not a readable notebook" in rows["garbage"]["notes"]
    assert (course / "submitted" / "garbage" / ASSIGNMENT / "roofline.ipynb.received").read_bytes() == GARBAGE


@needs_sandbox
@pytest.mark.slow
def test_a_grader_failure_for_one_student_is_recorded_and_the_class_goes_on(hostile_class):
    course, summary = hostile_class
    rows = {r["student"]: r for r in summary}
    assert "the grader broke here" in rows["wex"]["not_graded"]
    assert "nbgrader autograde failed" in rows["nbf"]["not_graded"] and "it broke" in rows["nbf"]["not_graded"]
    for student in ("wex", "nbf"):  # nbgrader's convention for a student without a graded submission: 0, no time
        assert float(_exported(course)[student]["score"]) == 0 and _exported(course)[student]["timestamp"] == ""
        assert not (course / "feedback" / student).exists()
    assert (course / "aisys_results" / ASSIGNMENT / "wex" / "not-graded.log").exists()


@needs_sandbox
@pytest.mark.slow
def test_submissions_are_normalised_and_the_original_kept(hostile_class):
    course, _ = hostile_class
    for student in ("meta", "surrogate"):
        submitted = course / "submitted" / student / ASSIGNMENT / "roofline.ipynb"
        notebook = nbformat.reads(submitted.read_text(), as_version=4)
        assert all(isinstance(c.metadata.get("nbgrader", {}), dict) for c in notebook.cells)
        assert submitted.with_suffix(".ipynb.received").exists()
    assert "\ufffd" in (course / "submitted" / "surrogate" / ASSIGNMENT / "roofline.ipynb").read_text()


@needs_sandbox
@pytest.mark.slow
@pytest.mark.parametrize("marker", ["xss-stream", "xss-html", "xss-svg", "xss-js", "xss-markdown", "xss-meta",
                                    "xss-meta2", "xss-base64"])
def test_student_output_reaches_the_feedback_page_as_text_only(hostile_class, marker):
    course, _ = hostile_class
    page = (course / "feedback" / "xss" / ASSIGNMENT / "roofline.html").read_text()
    in_markup, in_text = markup_holding(page, marker)
    assert in_markup == []
    if marker == "xss-stream":
        assert in_text, "printed text is shown, as text (and was not withheld)"


@needs_sandbox
@pytest.mark.slow
def test_a_nested_path_in_a_flat_class_is_reported_and_the_class_graded(tmp_path):
    course = make_course(tmp_path)
    subs = tmp_path / "class"
    subs.mkdir()
    for student in ("ada", "bob", "cat"):
        (subs / f"{student}.ipynb").write_bytes(as_bytes(honest()))
    _place(subs, "mallory", as_bytes(honest()))
    with jobs_in(tmp_path / "jobs"):
        summary = grade(subs, course, ASSIGNMENT, workers=2, timeouts=TIMEOUTS, limits=LIMITS, progress=False)
    assert {r["student"]: r["score"] for r in summary} == {"ada": FULL, "bob": FULL, "cat": FULL}
    assert summary.layout == "flat"
    assert [r.path for r in summary.refused] == ["mallory"]
    assert set(_exported(course)) == {"ada", "bob", "cat"}


@needs_sandbox
@pytest.mark.slow
def test_a_grading_worker_that_dies_costs_only_its_own_student(tmp_path, monkeypatch):
    """A worker process dying (a crash in the grader) breaks the whole process pool; the others are graded again."""
    import aisys_grader.course as course_module

    course = make_course(tmp_path)
    subs = tmp_path / "class"
    for student in ("ann", "ben", "dies"):
        _place(subs, student, as_bytes(honest()))
    real = course_module.grade_submission

    def grade_submission(course_dir, assignment, student, *args, **kwargs):
        if student == "dies":
            os._exit(1)
        return real(course_dir, assignment, student, *args, **kwargs)

    monkeypatch.setattr(course_module, "grade_submission", grade_submission)
    with jobs_in(tmp_path / "jobs"):
        rows = {r["student"]: r for r in grade(subs, course, ASSIGNMENT, workers=2, timeouts=TIMEOUTS, limits=LIMITS,
                                               progress=False)}
    assert rows["ann"]["score"] == rows["ben"]["score"] == FULL
    assert "grading worker process died" in rows["dies"]["not_graded"]
    assert {r: float(row["score"]) for r, row in _exported(course).items()} == {"ann": FULL, "ben": FULL, "dies": 0}
