"""Every exercise, generically: its solution passes, its blank notebook fails, its known-wrong answers fail."""

import pytest

from aisys_grader import checks_for
from notebooks import EXERCISES, ROOT, grade, graded_cells, namespace, source_notebook, student_notebook

WRONG = ROOT / "tests" / "wrong_answers"


def wrong_answers(exercise: str):
    return sorted((WRONG / exercise).glob("*.py"))


@pytest.mark.parametrize("exercise", EXERCISES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_solution_passes_every_check(exercise, seed):
    scope = namespace(source_notebook(exercise))
    for hidden in (False, True):
        results = grade(exercise, scope, hidden=hidden, seed=seed)
        assert results, f"{exercise} has no checks"
        failed = {name: r.message for name, r in results.items() if not r.passed}
        assert not failed, f"the solution of {exercise} fails: {failed}"


@pytest.mark.parametrize("exercise", EXERCISES)
def test_blank_student_notebook_fails_every_graded_check(exercise):
    scope = namespace(student_notebook(exercise))
    for hidden in (False, True):
        results = grade(exercise, scope, hidden=hidden, seed=1)
        passed = [name for name, r in results.items() if r.passed]
        assert not passed, f"the blank notebook of {exercise} passes {passed}"
        for r in results.values():
            assert "not implemented yet" in r.message, r.message


@pytest.mark.parametrize("exercise", EXERCISES)
def test_every_check_has_one_graded_cell_in_both_notebooks(exercise):
    names = list(checks_for(exercise))
    assert sorted(graded_cells(source_notebook(exercise))) == sorted(names)
    assert sorted(graded_cells(student_notebook(exercise))) == sorted(names)


@pytest.mark.parametrize("exercise", EXERCISES)
def test_student_notebook_holds_no_solution_or_hidden_check(exercise):
    text = student_notebook(exercise).read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "hidden=True"):
        assert marker not in text


@pytest.mark.parametrize("exercise", EXERCISES)
def test_exercise_has_known_wrong_answers(exercise):
    assert len(wrong_answers(exercise)) >= 3, f"keep at least three known-wrong answers in {WRONG / exercise}"


@pytest.mark.parametrize("path", [p for e in EXERCISES for p in wrong_answers(e)], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_known_wrong_answer_fails_exactly_its_checks(path):
    """Each file overrides some solution functions and lists in FAILS the checks that must reject it."""
    exercise = str(path.parent.relative_to(WRONG))
    scope = namespace(source_notebook(exercise), extra_code=path.read_text())
    expected = set(scope["FAILS"])
    assert expected <= set(checks_for(exercise)), f"{path.name} names unknown checks"
    for seed in (1, 2, 3):
        results = grade(exercise, scope, hidden=True, seed=seed)
        failed = {name for name, r in results.items() if not r.passed}
        assert failed == expected, f"{path.name}, seed {seed}: failed {sorted(failed)}, expected {sorted(expected)}"
