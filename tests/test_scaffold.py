"""`aisys-grader new`: the folder it writes is an exercise that passes the course's own tests from the start."""

import shutil

import pytest
import yaml

import aisys_exercises
from aisys_grader.generate import generate
from aisys_grader.scaffold import new
from aisys_grader import wrong
from notebooks import ROOT, grade, namespace, wrong_namespace

EXERCISE = "98-scaffold/scale"


@pytest.fixture
def scaffolded(tmp_path, monkeypatch):
    """The new exercise in a folder of exercises of its own, its notebooks generated, and a copy of the book's TOC."""
    root, toc = tmp_path / "exercises", tmp_path / "_toc.yml"
    chapter = "      - file: 05-parallel-training/index\n"  # a chapter without sections goes before it
    book = (ROOT / "book" / "_toc.yml").read_text()
    toc.write_text(book.replace(chapter, "      - file: 98-scaffold/index\n" + chapter))
    written = new(EXERCISE, "scaling a vector", root=root, toc=toc)
    monkeypatch.setattr(aisys_exercises, "__path__", [*aisys_exercises.__path__, str(root)])
    generate(out=tmp_path / "out", root=root)
    return tmp_path, written


def test_new_writes_the_folder_and_lists_it_in_the_book(scaffolded):
    tmp_path, written = scaffolded
    folder = tmp_path / "exercises" / EXERCISE
    assert sorted(p.name for p in written) == sorted(["notebook.py", "checks.py", "wrong_answers.toml", "spec.toml",
                                                      "_toc.yml"])
    assert 'checker("98-scaffold/scale", globals())' in (folder / "notebook.py").read_text()
    assert "# # Exercise: scaling a vector" in (folder / "notebook.py").read_text()
    chapters = {c["file"]: c for part in yaml.safe_load((tmp_path / "_toc.yml").read_text())["parts"]
                for c in part["chapters"]}
    assert chapters["98-scaffold/index"]["sections"] == [{"file": f"exercises/{EXERCISE}"}]
    assert chapters["07-inference/index"] == {c["file"]: c for part in yaml.safe_load(
        (ROOT / "book" / "_toc.yml").read_text())["parts"] for c in part["chapters"]}["07-inference/index"]


def test_the_template_solution_passes_and_its_blank_fails(scaffolded):
    tmp_path, _ = scaffolded
    solution = namespace(tmp_path / "out" / "autograder" / "source" / f"{EXERCISE}.ipynb")
    blank = namespace(tmp_path / "out" / "exercises" / f"{EXERCISE}.ipynb")
    for hidden in (False, True):
        assert all(r.passed for r in grade(EXERCISE, solution, hidden=hidden, seed=1).values())
        results = grade(EXERCISE, blank, hidden=hidden, seed=1).values()
        assert results and all(r.failed and "not implemented yet" in r.message for r in results)


def test_the_template_wrong_answer_fails_exactly_its_checks(scaffolded):
    tmp_path, _ = scaffolded
    [answer] = wrong.answers(EXERCISE)
    scope = wrong_namespace(EXERCISE, answer, tmp_path / "out" / "autograder" / "source" / f"{EXERCISE}.ipynb")
    for seed in (1, 2, 3):
        failed = {n for n, r in grade(EXERCISE, scope, hidden=True, seed=seed).items() if r.failed}
        assert failed == set(answer.fails) == {"scales"}


def test_new_refuses_what_it_cannot_do_and_overwrites_nothing(tmp_path):
    root, toc = tmp_path / "exercises", tmp_path / "_toc.yml"
    shutil.copy(ROOT / "book" / "_toc.yml", toc)
    with pytest.raises(ValueError, match="expected '<NN-chapter>/<name>'"):
        new("scale", "t", root=root)
    with pytest.raises(ValueError, match="title: expected one line without double quotes"):
        new(EXERCISE, 'say "hi"', root=root)
    (root / EXERCISE).mkdir(parents=True)
    (root / EXERCISE / "notebook.py").write_text("mine")
    with pytest.raises(ValueError, match="exists already; nothing was written"):
        new(EXERCISE, "t", root=root, toc=toc)
    assert (root / EXERCISE / "notebook.py").read_text() == "mine"
    with pytest.raises(ValueError, match="no chapter '97-none/index'"):
        new("97-none/scale", "t", root=root, toc=toc)
    assert not (root / "97-none").exists() and toc.read_text() == (ROOT / "book" / "_toc.yml").read_text()


def test_a_drill_set_is_an_assignment_of_its_own_and_refuses_what_is_not_a_drill(tmp_path):
    from aisys_grader.scaffold import drill_set

    written = drill_set(tmp_path, "drills-week-1", ["iou", "nms"])
    assert [p.name for p in written] == ["iou.ipynb", "nms.ipynb"]
    assert all(p.parent == tmp_path / "source" / "drills-week-1" for p in written)
    with pytest.raises(ValueError, match=r"'nope' not in the bank"):
        drill_set(tmp_path, "drills-week-2", ["iou", "nope"])
    with pytest.raises(ValueError, match="not a chapter's"):
        drill_set(tmp_path, "09-drills", ["iou"])
    with pytest.raises(ValueError, match="not in the bank"):
        drill_set(tmp_path, "w", ["roofline"])  # an exercise, but not a drill
    assert not (tmp_path / "source" / "drills-week-2").exists()
