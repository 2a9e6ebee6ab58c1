"""Every exercise, generically: its solution passes, its blank notebook fails, its known-wrong answers fail.

A check that cannot run here (a GPU-only check without a GPU) is skipped, neither passed nor
failed; a test whose checks were skipped asserts what it can (no check passed or failed that
should not have) and is then reported as skipped, never as passed.
"""

import pytest
from aisys_grader import checks_for, wrong
from aisys_grader.exercise import find
from hidden_data import grade_watching
from notebooks import EXERCISES, grade, graded_cells, namespace, source_notebook, student_notebook, wrong_namespace


def wrong_answers(exercise: str) -> list[wrong.Answer]:
    """As written (the test validates their checks: reading them all for collection would import every check)."""
    path = find(exercise).wrong_answers
    return wrong.read(path) if path.exists() else []


# The exercises this module tests: the chapters'. The interview drills' are tested by the same functions in
# test_exercises_drills.py, a file of its own, which pytest-xdist (--dist loadfile) runs on the other worker.
TESTED = [e for e in EXERCISES if not e.startswith("09-drills/")]


def pytest_generate_tests(metafunc):
    """Parametrize by the TESTED exercises of the module collecting the test (this one or the drills')."""
    tested = metafunc.module.TESTED
    if "name" in metafunc.fixturenames:
        pairs = [(e, a.name) for e in tested for a in wrong_answers(e)]
        metafunc.parametrize("exercise, name", pairs, ids=[f"{e}:{n}" for e, n in pairs])
    elif "exercise" in metafunc.fixturenames:
        metafunc.parametrize("exercise", tested)


def skip_if_skipped(exercise: str, results: list) -> None:
    """pytest.skip when any of these check results was skipped: the test cannot show what it is about."""
    skipped = {r.check.name: r.message for r in results if r.skipped}
    if skipped:
        pytest.skip(f"{exercise}: {sorted(skipped)} {next(iter(skipped.values()))}")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_solution_passes_every_check(exercise, seed):
    """Visible cases (the same for every seed: with the first), and hidden ones from the seed."""
    scope = namespace(source_notebook(exercise))
    seen = []
    for hidden in (False, True)[seed != 1:]:
        results = grade(exercise, scope, hidden=hidden, seed=seed)
        assert results, f"{exercise} has no checks"
        failed = {name: r.message for name, r in results.items() if r.failed}
        assert not failed, f"the solution of {exercise} fails: {failed}"
        seen += results.values()
    skip_if_skipped(exercise, seen)


def test_blank_student_notebook_fails_every_graded_check(exercise):
    scope = namespace(student_notebook(exercise))
    seen = []
    for hidden in (False, True):
        results = grade(exercise, scope, hidden=hidden, seed=1)
        passed = [name for name, r in results.items() if r.passed]
        assert not passed, f"the blank notebook of {exercise} passes {passed}"
        for r in results.values():
            assert "not implemented yet" in r.message or r.skipped, r.message
        seen += results.values()
    skip_if_skipped(exercise, seen)  # a skipped check shows that nothing passes, not that it fails


def test_every_check_has_one_graded_cell_in_both_notebooks(exercise):
    names = list(checks_for(exercise))
    assert sorted(graded_cells(source_notebook(exercise))) == sorted(names)
    assert sorted(graded_cells(student_notebook(exercise))) == sorted(names)


def test_student_notebook_holds_no_solution_or_hidden_check(exercise):
    text = student_notebook(exercise).read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "hidden=True"):
        assert marker not in text


def test_exercise_has_known_wrong_answers(exercise):
    path = find(exercise).wrong_answers
    assert len(wrong_answers(exercise)) >= 3, f"keep at least three known-wrong answers in {path}"


def test_known_wrong_answer_fails_exactly_its_checks(exercise, name):
    """Each answer edits the solution with a typical mistake (wrong_answers.toml) and lists the checks that must
    reject it; its notebook runs as a student's would. On the first seed every check runs (exactly those listed
    fail), and its failure messages are searched for the hidden data they must never show (hidden_data.py); on
    the others the listed checks run, and must fail too: a mistake is caught on every seed, not on most."""
    answer = next(a for a in wrong.answers(exercise) if a.name == name)  # its checks validated
    scope = wrong_namespace(exercise, answer)
    expected = set(answer.fails)
    seen = []
    for seed in (1, 2, 3):
        if seed == 1:
            results, leaks = grade_watching(exercise, scope, seed)
            assert not leaks, f"{name}: hidden data in failure messages: {leaks}"
        else:
            results = grade(exercise, scope, hidden=True, seed=seed, only=expected)
        failed = {check for check, r in results.items() if r.failed}
        skipped = {check for check, r in results.items() if r.skipped}
        assert failed == expected - skipped, (f"{exercise}:{name}, seed {seed}: failed {sorted(failed)}, "
                                              f"expected {sorted(expected - skipped)} (skipped: {sorted(skipped)})")
        seen += results.values()
        if expected <= skipped:  # nothing it must fail can run here: one seed shows that it passes the rest
            break
    skip_if_skipped(exercise, seen)
