"""Taking submissions in, and what graders write, without grading: layouts, links, names, zips, bounds, CSV, outputs.

The same rules end to end, with the sandbox, are in test_grading_intake.py.
"""

import csv
import json
import os
import stat
import struct
import subprocess
import sys
import zipfile
from datetime import datetime, timezone

import nbformat
import pytest
from nbconvert import HTMLExporter
from nbgrader.api import Gradebook
from nbgrader.preprocessors import CheckCellMetadata

from adversarial import HANDOUT, as_bytes, honest
from aisys_grader import cli, inert, intake
from aisys_grader.course import Summary, normalised
from aisys_grader.export import CsvExport
from notebooks import ROOT
from test_grading_intake import FORMULA, markup_holding

A = "01-architecture"
NOTEBOOKS = ["roofline"]
NOTEBOOK = as_bytes(honest())


def nested(folder, student: str, data: bytes = NOTEBOOK, notebook: str = "roofline"):
    path = folder / student / A / f"{notebook}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def collect(path, notebooks=NOTEBOOKS, layout="auto") -> tuple[intake.Intake, "intake.Folder | intake.Archive"]:
    source = intake.open_input(path)
    return intake.collect(source, A, notebooks, layout), source


def places(found: intake.Intake) -> dict[str, str]:
    return {s.student: s.path for s in found.submissions}


def refusals(found: intake.Intake) -> dict[str, tuple[str | None, str]]:
    return {r.path: (r.student, r.reason) for r in found.refused}


def archive(path, members: dict[str, bytes], links: dict[str, str] = {}, compression=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression) as zipped:
        for name, data in members.items():
            zipped.writestr(name, data)
        for name, target in links.items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3  # Unix, as zip -y stores a link
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zipped.writestr(info, target)
    return path


# One layout for the whole input; each student's notebook from their own place ------------------------------------

def test_a_copy_of_bob_in_mallorys_folder_never_replaces_bobs_notebook(tmp_path):
    nested(tmp_path, "bob")
    nested(tmp_path, "mallory")
    nested(tmp_path / "mallory", "bob", b"mallory's version of bob")
    found, source = collect(tmp_path)
    assert found.layout == "nbgrader"
    assert places(found) == {"bob": f"bob/{A}/roofline.ipynb", "mallory": f"mallory/{A}/roofline.ipynb"}
    assert source.read(("bob", A, "roofline.ipynb")) == NOTEBOOK
    assert refusals(found) == {"mallory/bob": ("mallory", f"not a submission (the layout is <student>/{A}/"
                                                          "<notebook>.ipynb)")}


def test_a_nested_path_in_a_flat_class_is_reported_and_the_flat_class_kept(tmp_path):
    for student in ("ada", "bob", "cat"):
        (tmp_path / f"{student}.ipynb").write_bytes(NOTEBOOK)
    nested(tmp_path, "mallory")
    found, _ = collect(tmp_path)
    assert found.layout == "flat" and sorted(places(found)) == ["ada", "bob", "cat"]
    assert list(refusals(found)) == ["mallory"]


def test_a_tie_between_layouts_is_refused_naming_both_and_layout_decides(tmp_path):
    (tmp_path / "ada.ipynb").write_bytes(NOTEBOOK)
    nested(tmp_path, "bob")
    with pytest.raises(ValueError, match=r"--layout nbgrader or --layout flat") as tie:
        collect(tmp_path)
    assert f"bob/{A}/roofline.ipynb" in str(tie.value) and "ada.ipynb" in str(tie.value)
    assert places(collect(tmp_path, layout="nbgrader")[0]) == {"bob": f"bob/{A}/roofline.ipynb"}
    flat, _ = collect(tmp_path, layout="flat")
    assert places(flat) == {"ada": "ada.ipynb"} and list(refusals(flat)) == ["bob"]


def test_several_notebooks_need_the_nbgrader_layout(tmp_path):
    nested(tmp_path, "ada", notebook="one")
    nested(tmp_path, "ada", notebook="two")
    found, _ = collect(tmp_path, ["one", "two"])
    assert [s.notebook for s in found.submissions] == ["one", "two"]
    with pytest.raises(ValueError, match="has 2 notebooks"):
        collect(tmp_path, ["one", "two"], layout="flat")


def test_a_wrapping_folder_is_unwrapped_but_a_class_of_one_is_not(tmp_path):
    nested(tmp_path / "one", "ada")
    assert places(collect(tmp_path / "one")[0]) == {"ada": f"ada/{A}/roofline.ipynb"}
    wrapped = tmp_path / "wrapped"
    nested(wrapped / "submitted", "ada")
    (wrapped / "__MACOSX").mkdir()
    found, _ = collect(wrapped)
    assert found.root == "submitted" and places(found) == {"ada": f"submitted/ada/{A}/roofline.ipynb"}
    assert list(refusals(found)) == ["__MACOSX"]


def test_nothing_found_is_refused_and_says_what_was_there(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match=r"(?s)no submissions found.*notes\.txt") as none:
        collect(tmp_path)
    assert "roofline.ipynb" in str(none.value)


# Links, devices, sizes ---------------------------------------------------------------------------------------------

def test_a_link_to_the_solution_is_refused_at_the_students_place(tmp_path):
    solution = ROOT / "autograder" / "source" / A / "roofline.ipynb"
    (tmp_path / "eve" / A).mkdir(parents=True)
    (tmp_path / "eve" / A / "roofline.ipynb").symlink_to(solution)
    nested(tmp_path, "ada")
    found, source = collect(tmp_path)
    assert places(found) == {"ada": f"ada/{A}/roofline.ipynb", "eve": f"eve/{A}/roofline.ipynb"}
    with pytest.raises(intake.Refused, match="symbolic link"):
        source.read(("eve", A, "roofline.ipynb"))


def test_linked_folders_are_never_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    nested(elsewhere, "fay")
    subs = tmp_path / "class"
    nested(subs, "ada")
    (subs / "fay").symlink_to(elsewhere / "fay")  # a linked student folder
    (subs / "gus").mkdir()
    (subs / "gus" / A).symlink_to(elsewhere / "fay" / A)  # a linked assignment folder
    found, source = collect(subs)
    assert places(found) == {"ada": f"ada/{A}/roofline.ipynb"}
    assert refusals(found)["fay"] == (None, intake.KINDS["link"])
    assert refusals(found)[f"gus/{A}"] == (None, intake.KINDS["link"])
    # and were a folder swapped for a link after it was looked at, the read would refuse it:
    with pytest.raises(intake.Refused):
        source.read(("fay", A, "roofline.ipynb"))


def test_a_folder_on_the_path_swapped_for_a_link_is_refused_when_read(tmp_path):
    nested(tmp_path, "ada")
    source = intake.Folder(tmp_path)
    (tmp_path / "ada").rename(tmp_path / "moved")
    (tmp_path / "ada").symlink_to(tmp_path / "moved")
    with pytest.raises(intake.Refused):
        source.read(("ada", A, "roofline.ipynb"))


def test_a_fifo_is_refused_without_blocking(tmp_path):
    (tmp_path / "ada" / A).mkdir(parents=True)
    os.mkfifo(tmp_path / "ada" / A / "roofline.ipynb")
    found, source = collect(tmp_path)
    with pytest.raises(intake.Refused, match="not a regular file"):
        source.read(found.submissions[0].parts)


def test_an_oversized_notebook_is_refused_before_it_is_read(tmp_path):
    path = nested(tmp_path, "big")
    with path.open("r+b") as file:
        file.truncate(intake.MAX_NOTEBOOK_BYTES + 1)  # sparse: no disk needed
    found, source = collect(tmp_path)
    with pytest.raises(intake.Refused, match=r"32\.0 MiB, over the 32 MiB limit"):
        source.read(found.submissions[0].parts)


# Student names -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, problem", [
    ("new\nline", "newline"), ("bell\x07", "control or invisible character (U+0007)"),
    ("rtl\u202eevil", "U+202E"), ("back\\slash", "path separator"), ("b?b", "wildcard"), ("a*", "wildcard"),
    (".hidden", "begins with a dot"), (" ada", "space"), ("x" * 129, "longer than 128"),
])
def test_odd_student_names_are_refused_and_reported(tmp_path, name, problem):
    assert problem in intake.name_problem(name)
    nested(tmp_path, name)
    nested(tmp_path, "ada")
    found, _ = collect(tmp_path)
    assert places(found) == {"ada": f"ada/{A}/roofline.ipynb"}
    assert problem in found.bad_names[repr(name)]
    assert any(problem in reason for _, reason in refusals(found).values())


@pytest.mark.parametrize("name", ["José", "o'brien", FORMULA, "-1+2", "ada lovelace", "学生"])
def test_ordinary_and_formula_like_names_are_students(name):
    assert intake.name_problem(name) is None


def test_a_path_with_odd_characters_is_shown_escaped():
    assert intake.shown(("new\nline", "x")) == repr("new\nline/x")
    assert intake.shown(("ada", "x")) == "ada/x"


# Zips: never extracted, read in a counted stream ---------------------------------------------------------------------

def test_a_zip_bomb_is_refused_at_its_student_once_past_the_limit(tmp_path):
    path = archive(tmp_path / "class.zip", {f"ada/{A}/roofline.ipynb": NOTEBOOK})
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as zipped:
        with zipped.open(f"bob/{A}/roofline.ipynb", "w") as bomb:  # 400 MiB of valid JSON
            bomb.write(b"{")
            for _ in range(400):
                bomb.write(b" " * 2**20)
            bomb.write(b"}")
    assert path.stat().st_size < 2**20
    found, source = collect(path)
    assert sorted(places(found)) == ["ada", "bob"]
    with pytest.raises(intake.Refused, match="32 MiB limit for a notebook once decompressed"):
        source.read(("bob", A, "roofline.ipynb"))
    assert source.total <= intake.MAX_NOTEBOOK_BYTES + 2**20, "it stopped reading at the limit"
    assert source.read(("ada", A, "roofline.ipynb")) == NOTEBOOK


def test_a_member_that_grows_more_than_200_fold_is_refused_early(tmp_path):
    path = archive(tmp_path / "class.zip", {f"ada/{A}/roofline.ipynb": b" " * (10 * 2**20)})
    found, source = collect(path)
    with pytest.raises(intake.Refused, match="a likely zip bomb"):
        source.read(found.submissions[0].parts)
    assert source.total <= 2 * 2**20


def test_a_zip_member_over_the_size_limit_is_refused(tmp_path):
    big = b" " * (intake.MAX_NOTEBOOK_BYTES + 1)
    path = archive(tmp_path / "class.zip", {f"ada/{A}/roofline.ipynb": big}, compression=zipfile.ZIP_STORED)
    found, source = collect(path)
    with pytest.raises(intake.Refused, match="32 MiB limit for a notebook once decompressed"):
        source.read(found.submissions[0].parts)


def test_zip_members_that_are_links_leave_the_input_or_repeat_are_refused(tmp_path):
    solution = str(ROOT / "autograder" / "source" / A / "roofline.ipynb")
    path = archive(tmp_path / "class.zip", {
        f"ada/{A}/roofline.ipynb": NOTEBOOK, "../../escaped.ipynb": b"{}", "/abs.ipynb": b"{}",
        f"cat/./{A}/roofline.ipynb": b"{}", f"dan/{A}/roofline.ipynb": NOTEBOOK},
        links={f"eve/{A}/roofline.ipynb": solution})
    with zipfile.ZipFile(path, "a") as zipped:
        with pytest.warns(UserWarning, match="Duplicate name"):
            zipped.writestr(f"dan/{A}/roofline.ipynb", b"another dan")
    found, source = collect(path)
    assert sorted(places(found)) == ["ada", "dan", "eve"]
    reasons = refusals(found)
    assert "leaves the input" in reasons["../../escaped.ipynb"][1]
    assert "absolute" in reasons["/abs.ipynb"][1] and "`.`" in reasons[f"cat/./{A}/roofline.ipynb"][1]
    with pytest.raises(intake.Refused, match="symbolic link"):
        source.read(("eve", A, "roofline.ipynb"))
    with pytest.raises(intake.Refused, match="more than once"):
        source.read(("dan", A, "roofline.ipynb"))
    assert source.read(("ada", A, "roofline.ipynb")) == NOTEBOOK


def test_a_zip_with_one_top_folder_is_unwrapped(tmp_path):
    path = archive(tmp_path / "class.zip", {f"submitted/ada/{A}/roofline.ipynb": NOTEBOOK,
                                            f"__MACOSX/submitted/ada/{A}/._roofline.ipynb": b"\0"})
    found, _ = collect(path)
    assert found.root == "submitted" and places(found) == {"ada": f"submitted/ada/{A}/roofline.ipynb"}


def test_an_archive_that_cannot_be_used_is_refused_as_a_whole(tmp_path, monkeypatch):
    path = archive(tmp_path / "class.zip", {f"{s}/{A}/roofline.ipynb": NOTEBOOK for s in ("ada", "bob", "cat")})
    monkeypatch.setattr(intake, "MAX_ENTRIES", 2)
    with pytest.raises(intake.ArchiveRefused, match="3 members, over the limit of 2"):
        intake.open_input(path)
    monkeypatch.undo()
    monkeypatch.setattr(intake, "MAX_ARCHIVE_BYTES", 2 * len(NOTEBOOK) + 1)
    found, source = collect(path)
    source.read(found.submissions[0].parts)
    source.read(found.submissions[1].parts)
    with pytest.raises(intake.ArchiveRefused, match="split it"):
        source.read(found.submissions[2].parts)


def test_neither_a_folder_nor_a_zip_is_refused(tmp_path):
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(ValueError, match="a folder or a zip"):
        intake.open_input(tmp_path / "x.txt")


# What goes into submitted/ -----------------------------------------------------------------------------------------

def test_the_normalised_notebook_is_one_nbgraders_checks_accept_with_stable_ids():
    raw = json.loads(NOTEBOOK)
    raw["metadata"]["aisys"] = 3
    raw["cells"].append({"cell_type": "code", "metadata": {"nbgrader": {"grade": True, "solution": "x"}},
                         "source": "x = '\udc80'", "outputs": [], "execution_count": None})
    raw["cells"].append({"cell_type": "code", "metadata": {"nbgrader": 5}, "source": "y = 1", "outputs": [],
                         "execution_count": None})
    submission = nbformat.from_dict(raw)
    with pytest.raises(Exception):
        CheckCellMetadata().preprocess(nbformat.from_dict(json.loads(json.dumps(raw))), {})
    first, again = normalised(HANDOUT, submission), normalised(HANDOUT, nbformat.from_dict(raw))
    data = nbformat.writes(first).encode()  # no lone surrogate left
    assert data == nbformat.writes(again).encode(), "the same submission gives the same file"
    CheckCellMetadata().preprocess(first, {})
    extras = [c for c in first.cells if c.source in ("x = '\ufffd'", "y = 1")]
    assert len(extras) == 2 and all("nbgrader" not in c.metadata for c in extras)
    assert "aisys" not in first.metadata  # the submission's own metadata is not carried over


# When each student submitted ---------------------------------------------------------------------------------------

def _when(found, source, student):
    return intake.submitted_at(source, found.layout, [s for s in found.submissions if s.student == student])


def test_the_submission_time_is_nbgraders_timestamp_txt_else_the_notebooks_modification_time(tmp_path):
    os.utime(nested(tmp_path, "ada"), (0, 1_700_000_000))
    (tmp_path / "ada" / A / "timestamp.txt").write_text("2026-11-20 09:30:00.000000 UTC")
    os.utime(nested(tmp_path, "bob"), (0, 1_700_000_000))
    os.utime(nested(tmp_path, "cat"), (0, 1_700_000_000))
    (tmp_path / "cat" / A / "timestamp.txt").write_text("next tuesday, perhaps")
    found, source = collect(tmp_path)
    assert _when(found, source, "ada") == (datetime(2026, 11, 20, 9, 30, tzinfo=timezone.utc), "timestamp.txt")
    assert _when(found, source, "bob") == (datetime.fromtimestamp(1_700_000_000, timezone.utc),
                                           "the notebook file's modification time")
    when, basis = _when(found, source, "cat")
    assert when.timestamp() == 1_700_000_000 and basis.startswith("the notebook file's modification time "
                                                                  "(timestamp.txt was unreadable: ")
    assert not any(r.path.endswith("timestamp.txt") for r in found.refused), "timestamp.txt is used, not stray"


def test_a_zip_members_time_is_its_unix_time_where_recorded_else_its_dos_time_read_as_utc(tmp_path):
    path = tmp_path / "class.zip"
    with zipfile.ZipFile(path, "w") as zipped:
        dos = zipfile.ZipInfo("ada.ipynb", date_time=(2026, 11, 20, 9, 30, 0))
        zipped.writestr(dos, NOTEBOOK)
        unix = zipfile.ZipInfo("bob.ipynb", date_time=(1999, 1, 1, 0, 0, 0))
        unix.extra = struct.pack("<HHBi", 0x5455, 5, 1, 1_700_000_000)  # Info-ZIP's "UT" field: the mtime
        zipped.writestr(unix, NOTEBOOK)
    found, source = collect(path)
    assert found.layout == "flat"
    assert _when(found, source, "ada")[0] == datetime(2026, 11, 20, 9, 30, tzinfo=timezone.utc)
    assert _when(found, source, "bob")[0] == datetime.fromtimestamp(1_700_000_000, timezone.utc)


# grades.csv --------------------------------------------------------------------------------------------------------

@pytest.fixture
def alembic_on_path(monkeypatch):  # nbgrader runs `alembic` from PATH to set up a gradebook
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")


def test_the_csv_escapes_formulas_and_reads_back_with_csv(tmp_path, alembic_on_path):
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(db) as gradebook:
        gradebook.add_assignment(A)
        gradebook.add_student(FORMULA, last_name="+SUM(1)", first_name="-2", email="@x")
        gradebook.add_student("ada,\nlovelace", first_name="\tTab")
        CsvExport(to=str(tmp_path / "grades.csv")).export(gradebook)
    rows = {r["student_id"]: r for r in csv.DictReader((tmp_path / "grades.csv").open(newline=""))}
    assert set(rows) == {"'" + FORMULA, "ada,\nlovelace"}
    formula = rows["'" + FORMULA]
    assert (formula["last_name"], formula["first_name"], formula["email"]) == ("'+SUM(1)", "'-2", "'@x")
    assert rows["ada,\nlovelace"]["first_name"] == "'\tTab"
    assert float(formula["score"]) == 0 and formula["timestamp"] == ""  # nothing submitted: nbgrader's 0


def test_plain_nbgrader_export_uses_the_safe_csv(tmp_path, alembic_on_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text((ROOT / "autograder" / "nbgrader_config.py").read_text())
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        gradebook.add_assignment(A)
        gradebook.add_student(FORMULA)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to", "grades.csv"], cwd=course, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [r["student_id"] for r in csv.DictReader((course / "grades.csv").open(newline=""))] == ["'" + FORMULA]


# Outputs made inert ------------------------------------------------------------------------------------------------

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
HOSTILE = [
    {"output_type": "stream", "name": "stdout", "text": '<script>alert("xss-stream")</script>\udc80'},
    {"output_type": "stream", "name": '"><script>xss-name</script>', "text": ["a", "b"]},
    {"output_type": "display_data", "metadata": {}, "data": {
        "text/html": '<script>alert("xss-html")</script><img src=x onerror=alert(1) alt="xss-html-img">'}},
    {"output_type": "display_data", "metadata": {}, "data": {
        "image/svg+xml": '<svg onload="alert(1)"><script>xss-svg</script></svg>', "text/plain": "<SVG object>"}},
    {"output_type": "display_data", "metadata": {}, "data": {"application/javascript": 'alert("xss-js")'}},
    {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": '<img src=x onerror="xss-md">'}},
    {"output_type": "display_data", "data": {"image/png": PNG},
     "metadata": {"image/png": {"width": "1 onerror=alert('xss-meta')", "alt": "xss-alt"}}},
    {"output_type": "display_data", "data": {"image/png": PNG}, "metadata": {"width": "1 onerror=xss-meta2"}},
    {"output_type": "display_data", "metadata": {}, "data": {"image/png": 'x" onerror="xss-base64'}},
    {"output_type": "execute_result", "execution_count": "7", "metadata": {}, "data": {"text/latex": "xss-latex",
                                                                                         "text/plain": "7"}},
    {"output_type": "error", "ename": "<b>xss-ename</b>", "evalue": "\udc80", "traceback": ["<i>xss-tb</i>", 3]},
    {"output_type": "<xss-kind>"},
    "not even a dict",
]


def test_inert_outputs_keep_only_text_and_checked_images():
    outputs = inert.outputs(HOSTILE)
    assert len(outputs) == len(HOSTILE)
    nbformat.validate(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=outputs)]))
    assert outputs[0].text.endswith("</script>\ufffd") and outputs[1].name == "stdout" and outputs[1].text == "ab"
    assert outputs[3].data == {"text/plain": "<SVG object>"}
    assert outputs[6].data == {"image/png": PNG} and outputs[6].metadata == {}
    assert outputs[8].data == {"text/plain": "[an output of type image/png: not shown in feedback]"}
    assert outputs[9].data == {"text/plain": "7"} and outputs[9].execution_count is None
    assert outputs[10].traceback == ["<i>xss-tb</i>", ""] and outputs[10].evalue == "\ufffd"
    assert all(set(o.get("data", {})) <= {"text/plain", "image/png", "image/jpeg"} for o in outputs)
    assert all(not o.get("metadata") for o in outputs)


@pytest.mark.parametrize("marker", ["xss-stream", "xss-name", "xss-html", "xss-svg", "xss-js", "xss-md", "xss-meta",
                                    "xss-meta2", "xss-alt", "xss-base64", "xss-latex", "xss-ename", "xss-tb",
                                    "xss-kind"])
def test_inert_outputs_render_as_text_only(marker):
    """nbgrader's feedback page extends nbconvert's classic template: render with it and parse the page."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("pass", outputs=inert.outputs(HOSTILE))])
    page, _ = HTMLExporter(template_name="classic").from_notebook_node(notebook)
    in_markup, _ = markup_holding(page, marker)
    assert in_markup == []


def test_the_raw_outputs_would_have_put_markup_in_the_page():
    """The test above tests something: without inert.outputs the same page holds the payloads as markup."""
    raw = [nbformat.from_dict(o) for o in HOSTILE[2:3] + HOSTILE[6:7]]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("pass", outputs=raw)])
    page, _ = HTMLExporter(template_name="classic").from_notebook_node(notebook)
    assert markup_holding(page, "xss-html")[0] and markup_holding(page, "xss-meta")[0]


# The command's report and exit status ------------------------------------------------------------------------------

def _summary(not_graded: int, graded: int = 1) -> Summary:
    rows = [{"student": f"s{i}", "score": 7, "max_score": 7, "notes": "", "needs_gpu": [], "not_graded": ""}
            for i in range(graded)]
    rows += [{"student": f"f{i}", "score": 0, "max_score": 0, "notes": "", "needs_gpu": [],
              "not_graded": "grading roofline failed: OSError: boom"} for i in range(not_graded)]
    refused = [intake.Refusal("mallory/bob", "not a submission", "mallory")]
    return Summary(rows, "nbgrader", "submitted", refused)


@pytest.mark.parametrize("not_graded, status", [(0, 0), (3, 3), (200, 125)])
def test_the_exit_status_counts_students_not_graded(monkeypatch, capsys, tmp_path, not_graded, status):
    monkeypatch.setattr("aisys_grader.course.grade", lambda *args, **kwargs: _summary(not_graded))
    assert cli.main(["grade", str(tmp_path), "--assignment", A]) == status
    out = capsys.readouterr().out
    students = f"{not_graded + 1} student" + "s" * bool(not_graded)
    assert out.startswith(f"layout: nbgrader in submitted/, {students}\n"
                          "not used [mallory]: mallory/bob: not a submission\n")
    if not_graded:
        assert "f0       not graded: grading roofline failed: OSError: boom" in out
        assert out.splitlines()[-1].startswith(f"{not_graded} students not graded")


def test_the_command_ends_with_what_was_not_regraded_when_students_submitted_and_where_it_wrote(
        monkeypatch, capsys, tmp_path):
    summary = _summary(0, graded=3)
    for row, basis in zip(summary, ["timestamp.txt", "timestamp.txt", "the notebook file's modification time"]):
        row["submitted_from"] = basis
    summary.unchanged, summary.written = 2, {"grades": tmp_path / "grades.csv", "feedback": tmp_path / "fb"}
    monkeypatch.setattr("aisys_grader.course.grade", lambda *args, **kwargs: summary)
    assert cli.main(["grade", str(tmp_path), "--assignment", A]) == 0
    assert capsys.readouterr().out.splitlines()[-4:] == [
        "2 notebooks unchanged, not regraded (--force grades them again)",
        "submission times (grades.csv's timestamp): 1 from the notebook file's modification time; "
        "2 from timestamp.txt",
        f"grades: {tmp_path / 'grades.csv'}", f"feedback pages: {tmp_path / 'fb'}"]


def test_the_help_says_what_the_exit_status_means(capsys):
    with pytest.raises(SystemExit):
        cli.main(["grade", "--help"])
    assert "the number of students not graded (at most 125)" in " ".join(capsys.readouterr().out.split())
