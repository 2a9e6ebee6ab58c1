"""Each exercise is one folder whose path is its id: what is in it, and everything else, agrees with the folder."""

import re

import pytest
import yaml

from aisys_grader.exercise import check_needs, exercise_ids, find, read_spec
from notebooks import EXERCISES, ROOT

FILES = {"notebook.py", "checks.py", "spec.toml", "wrong_answers.toml"}
TOC = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())


def toc_chapters() -> dict[str, list[str]]:
    """Each chapter's index page in the book's table of contents, with the files of its sections in order."""
    return {entry["file"]: [s["file"] for s in entry.get("sections", [])]
            for part in TOC["parts"] for entry in part["chapters"]}


def test_every_exercise_is_a_folder_of_the_course():
    assert EXERCISES == exercise_ids() and len(EXERCISES) >= 30
    loose = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "solutions").glob("*/*") if not p.is_dir())
    assert not loose, f"files outside an exercise's folder: {loose}"
    folders = sorted(f"{p.parent.name}/{p.name}" for p in (ROOT / "solutions").glob("*/*") if p.is_dir())
    assert folders == EXERCISES, "a folder without spec.toml, or a name that is not <NN-chapter>/<name>"


@pytest.mark.parametrize("exercise", EXERCISES)
def test_the_folder_holds_the_exercise_and_nothing_else(exercise):
    folder = find(exercise).folder
    assert {p.name for p in folder.iterdir() if p.name != "__pycache__"} == FILES


@pytest.mark.parametrize("exercise", EXERCISES)
def test_the_id_is_written_only_where_the_notebook_needs_it(exercise):
    """The notebook names its exercise for the checks it runs on a student's laptop: once, as the folder says.
    Nothing else in the folder spells the id (spec.toml has no key for it)."""
    item = find(exercise)
    calls = re.findall(r'checker\("([^"]*)", globals\(\)\)', item.notebook.read_text())
    assert calls == [exercise], f"{item.notebook}: checker(...) names {calls}, the folder says {exercise}"
    assert item.notebook.read_text().count(exercise) == 1
    for path in (item.checks, item.wrong_answers):
        assert exercise not in path.read_text(), f"{path} spells the id, which comes from the folder"


@pytest.mark.parametrize("exercise", EXERCISES)
def test_spec_title_is_the_notebooks_heading(exercise):
    item = find(exercise)
    heading = re.search(r"^# # Exercise[^:\n]*: (.*)$", item.notebook.read_text(), re.M)
    assert heading and heading.group(1) == item.spec.title, f"heading {heading and heading.group(0)!r}"


@pytest.mark.parametrize("exercise", EXERCISES)
def test_the_book_lists_the_exercise_under_its_chapter_after_the_page_that_teaches_it(exercise):
    item = find(exercise)
    sections = toc_chapters().get(f"{item.chapter}/index", [])
    assert f"exercises/{exercise}" in sections, f"book/_toc.yml: exercises/{exercise} is not under {item.chapter}"
    assert item.spec.page in sections, f"spec page {item.spec.page!r} is not a page of {item.chapter} in the book"
    page = (ROOT / "book" / f"{item.spec.page}.md").read_text()
    listed = f"exercises/{exercise}" in page or (item.spec.drill is not None and "{drill-bank}" in page)
    assert listed, f"{item.spec.page}.md never links to the exercise (a drill's page may list the bank's table)"


def test_the_book_lists_no_exercise_that_has_no_folder():
    listed = [f for sections in toc_chapters().values() for f in sections if f.startswith("exercises/")]
    assert sorted(listed) == sorted(f"exercises/{e}" for e in EXERCISES)


@pytest.mark.parametrize("exercise", EXERCISES)
def test_spec_gpus_is_what_the_checks_need(exercise):
    item = find(exercise)
    needs = check_needs(item.checks)
    assert len(needs) == item.checks.read_text().count("\n@check(")
    assert item.spec.gpus == max(need.gpus for need in needs)


SPEC = 'title = "t"\ngpus = 0\nreference = ["aisys.a"]\nstudent_may_import = ["aisys.b"]\n'


@pytest.mark.parametrize("text, error", [
    (SPEC + "colour = 1\n", r"unknown keys \['colour'\]"),
    (SPEC.replace("gpus = 0\n", ""), r"missing keys \['gpus'\]"),
    (SPEC.replace("gpus = 0", 'gpus = "one"'), "gpus must be a int, got 'one'"),
    (SPEC.replace("gpus = 0", "gpus = true"), "gpus must be a int, got True"),
    (SPEC.replace('["aisys.b"]', '["aisys.a"]'), r"\['aisys.a'\] are both reference and student_may_import"),
    (SPEC.replace('["aisys.b"]', '["numpy"]'), "student_may_import must list aisys module names"),
    (SPEC + 'clean_room = ["aisys.c"]\n', r"clean_room lists \['aisys.c'\], which student_may_import does not"),
    ("title = ", "not a readable TOML file"),
])
def test_a_bad_spec_is_refused_naming_the_file_and_the_key(tmp_path, text, error):
    path = tmp_path / "spec.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=error) as raised:
        read_spec(path)
    assert str(path) in str(raised.value)


def test_an_unknown_exercise_is_refused_with_the_ones_there_are():
    with pytest.raises(ValueError, match="no folder 07-inference/nothing with a spec.toml"):
        find("07-inference/nothing")
    with pytest.raises(ValueError, match="expected '<NN-chapter>/<name>'"):
        find("kv_cache")
