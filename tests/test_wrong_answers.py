"""Known-wrong answers as edits of the solution (aisys_grader/wrong.py): what a wrong_answers.toml may say, and
that every exercise's answers apply to its solution. test_exercises.py grades them."""

import re
import textwrap

import jupytext
import pytest
from aisys_grader import checks_for, wrong
from aisys_grader.exercise import find
from notebooks import EXERCISES

EXERCISE = "07-inference/kv_cache"
GOOD = '''
[[answer]]
name = "size_of_one_layer"
mistake = "Forgets that every layer has its own keys and values."
fails = ["kv_cache_bytes", "max_sequences"]

[[answer.edit]]
old = """    per_token = 2 * config["n_layers"] * config["n_kv_heads"] * head_size * BYTES[dtype]\n"""
new = """    per_token = 2 * config["n_kv_heads"] * head_size * BYTES[dtype]\n"""
'''


def toml(tmp_path, text: str):
    path = tmp_path / "wrong_answers.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_an_answer_reads_as_written_and_edits_the_solution_as_the_student_writes_it(tmp_path):
    (answer,) = wrong.read(toml(tmp_path, GOOD), checks_for(EXERCISE))
    assert answer.name == "size_of_one_layer" and answer.fails == ("kv_cache_bytes", "max_sequences")
    solution = wrong.solution_program(EXERCISE)
    assert "### BEGIN SOLUTION" not in solution and "### END SOLUTION" not in solution
    assert solution.count("\n") < find(EXERCISE).notebook.read_text().count("\n")
    program = wrong.wrong_program(EXERCISE, answer)
    assert program == solution.replace(answer.edits[0].old, answer.edits[0].new) != solution


@pytest.mark.parametrize("old, times", [("return per_token * tokens * batch\n    ", 0), ("head_size", 2)])
def test_an_edit_whose_old_text_does_not_occur_exactly_once_is_an_error_quoting_it(old, times):
    answer = wrong.Answer("vague", "A mistake.", ("kv_cache_bytes",), (wrong.Edit(old, "x"),))
    with pytest.raises(ValueError, match=f"answer 'vague', edit 1: old occurs {times} times in the solution of "
                                         f"{EXERCISE} .*, not once:\n    {re.escape('| ' + old.splitlines()[0])}"):
        wrong.wrong_program(EXERCISE, answer)


def test_edits_apply_in_order_each_to_the_program_the_ones_before_made():
    first, second = wrong.Edit("a = 1\n", "a = 2\nb = 2\n"), wrong.Edit("b = 2\n", "b = 3\n")
    assert wrong.apply("a = 1\n", wrong.Answer("two", "m", ("c",), (first, second))) == "a = 2\nb = 3\n"
    with pytest.raises(ValueError, match="edit 1: old occurs 0 times"):
        wrong.apply("a = 1\n", wrong.Answer("two", "m", ("c",), (second, first)))
    with pytest.raises(ValueError, match="edit 1: old occurs 2 times"):  # overlapping occurrences count
        wrong.apply("aaa\n", wrong.Answer("overlap", "m", ("c",), (wrong.Edit("aa", "b"),)))


REFUSED = [
    (GOOD.replace('fails = ["kv_cache_bytes", "max_sequences"]\n', ""),
     "answer 'size_of_one_layer': missing keys ['fails']; it may have name, mistake, fails, edit, code"),
    (GOOD.replace("fails = [", 'checks = ["kv_cache_bytes"]\nfails = ['),
     "answer 'size_of_one_layer': unknown keys ['checks']"),
    (GOOD.replace('old = """', 'before = """'),
     "answer 'size_of_one_layer', edit 1: unknown keys ['before']; missing keys ['old']"),
    (GOOD.replace('"max_sequences"]', '"max_sequence"]'),
     "answer 'size_of_one_layer': fails names ['max_sequence'], which are not checks of the exercise"),
    (GOOD.replace('fails = ["kv_cache_bytes", "max_sequences"]', "fails = []"), "fails must list the checks"),
    (GOOD.replace('fails = ["kv_cache_bytes", "max_sequences"]', 'fails = "kv_cache_bytes"'),
     "fails must be a list"),
    (GOOD + GOOD, "answer names must be unique; more than one is named ['size_of_one_layer']"),
    (GOOD.replace('"size_of_one_layer"', '"Size of one layer"'), "name must be lower-case letters, digits and _"),
    (GOOD.replace('fails = [', 'code = "x = 1"\nfails = ['),
     "give either edits ([[answer.edit]] with old and new) or code, not both"),
    (GOOD.split("[[answer.edit]]")[0], "or code, not neither"),
    (GOOD.replace('new = """    per_token = 2 * config["n_kv_heads"]',
                  'new = """    per_token = 2 * config["n_layers"] * config["n_kv_heads"]'), "old must be a snippet"),
    ("[answer]\nname = 'x'\n", "expected [[answer]] tables only"),
    ("answers = []\n", "expected [[answer]] tables only, got keys ['answers']"),
    ("[[answer]\n", "not a readable TOML file"),
]


@pytest.mark.parametrize("text, says", REFUSED, ids=[says[:50] for _, says in REFUSED])
def test_a_malformed_file_is_refused_naming_the_file_the_answer_and_the_key(tmp_path, text, says):
    path = toml(tmp_path, text)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: .*{re.escape(says)}"):
        wrong.read(path, checks_for(EXERCISE))


def test_unknown_checks_are_refused_only_where_the_checks_are_known(tmp_path):
    path = toml(tmp_path, GOOD.replace('"max_sequences"]', '"max_sequence"]'))
    assert wrong.read(path)[0].fails == ("kv_cache_bytes", "max_sequence")
    with pytest.raises(ValueError, match="not checks of the exercise; its checks are kv_cache_bytes, max_sequences"):
        wrong.read(path, checks_for(EXERCISE))


@pytest.mark.parametrize("exercise", EXERCISES)
def test_every_answer_names_its_checks_and_edits_only_what_a_student_writes(exercise):
    """Quickly, without running the notebooks: every answer's edits apply and change only cells tagged "solution"
    (the grader puts every other cell back as the handout has it), keeping the cells as they are."""
    solution = jupytext.reads(wrong.solution_program(exercise), fmt="py:percent").cells
    for answer in wrong.answers(exercise):
        program = wrong.wrong_program(exercise, answer)
        cells = jupytext.reads(program, fmt="py:percent").cells
        assert [c.metadata for c in cells] == [c.metadata for c in solution], f"{answer.name}: cells added or removed"
        changed = [i for i, (a, b) in enumerate(zip(solution, cells)) if a.source != b.source]
        assert bool(changed) == bool(answer.edits), answer.name
        locked = [i for i in changed if "solution" not in solution[i].metadata.get("tags", [])]
        assert not locked, f"{answer.name} edits cells {locked}, which are not tagged solution"
        compile(program + "\n" + answer.code, f"{exercise}:{answer.name}", "exec")
