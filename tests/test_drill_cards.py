"""The concept cards of the drill bank (aisys.drill.cards) and the answer types they use (aisys.drill.card).

Every card must build from aisys alone, point at a page of the book, carry tags from the shared vocabulary, accept
its own answer and reject the usual wrong ones; its module may type no float except a tolerance, so that every
number it states comes from aisys. The judges must answer malformed input with a message, never an exception.
"""

import ast
import math
import os
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest

from aisys.drill import cards as cards_package
from aisys.drill.card import Ask, Choice, Number, Several, Verdict, all_cards
from aisys.drill.tags import DIFFICULTIES, FREQUENCIES, TOPICS

ROOT = Path(__file__).parents[1]
CARD_MODULES = sorted(p for p in Path(cards_package.__file__).parent.glob("*.py") if p.name != "__init__.py")
CARDS = all_cards()
LETTERS = string.ascii_lowercase


def book_pages() -> set[str]:
    toc = (ROOT / "book" / "_toc.yml").read_text()
    return set(re.findall(r"^\s*(?:-\s*)?(?:file|root):\s*(\S+)\s*$", toc, flags=re.MULTILINE))


PAGES = book_pages()


def card_ids():
    return sorted(CARDS)


def test_there_are_enough_cards_spread_over_topics_and_difficulties():
    assert len(CARDS) >= 80
    difficulties = {d: sum(c.difficulty == d for c in CARDS.values()) for d in DIFFICULTIES}
    assert all(n >= len(CARDS) // 6 for n in difficulties.values()), difficulties
    assert len({c.topic for c in CARDS.values()}) >= 10


def test_card_ids_are_unique_across_modules():
    names = []
    for path in CARD_MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Call) and getattr(d.func, "id", None) == "card" for d in node.decorator_list):
                names.append(node.name.replace("_", "-"))
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert set(names) == set(CARDS)


def test_the_toc_parser_finds_written_pages():
    assert {"01-architecture/roofline", "07-inference/flash-attention", "intro"} <= PAGES


@pytest.mark.parametrize("card_id", card_ids())
def test_card_builds_with_tags_a_page_and_words(card_id):
    card = CARDS[card_id]
    ask = card.make()
    assert isinstance(ask, Ask)
    assert ask.question.strip() and ask.explanation.strip()
    assert card.page in PAGES, f"{card_id}: page {card.page!r} is not in book/_toc.yml"
    assert card.topic in TOPICS and card.difficulty in DIFFICULTIES and card.frequency in FREQUENCIES
    for text in (ask.question, ask.explanation):
        # a placeholder left in a string that was not an f-string
        assert not re.search(r"\{[A-Za-z_][\w.]*[(}\[:]", text), f"{card_id}: unformatted placeholder in {text!r}"
    if isinstance(ask.answer, (Choice, Several)):
        options = ask.answer.options
        assert 2 <= len(options) <= 10 and len(set(options)) == len(options)
        assert all(isinstance(o, str) and o.strip() for o in options)


@pytest.mark.parametrize("card_id", card_ids())
def test_card_accepts_its_answer_and_rejects_typical_wrong_ones(card_id):
    card = CARDS[card_id]
    answer = card.ask.answer
    if isinstance(answer, Number):
        assert math.isfinite(answer.value)
        assert card.judge(str(answer.value)).correct
        for wrong in (answer.value * 2, answer.value / 2):
            if not math.isclose(wrong, answer.value, rel_tol=answer.rel, abs_tol=answer.abs):
                assert not card.judge(str(wrong)).correct, f"{card_id}: {wrong} judged right"
        assert answer.rel < 1 / 2, "a tolerance this wide accepts half or double the answer"
    elif isinstance(answer, Choice):
        assert 0 <= answer.answer < len(answer.options)
        assert card.judge(LETTERS[answer.answer]).correct
        assert card.judge(LETTERS[answer.answer].upper() + ")").correct
        for other in range(len(answer.options)):
            if other != answer.answer:
                assert not card.judge(LETTERS[other]).correct
    else:
        assert isinstance(answer, Several)
        right = sorted(answer.answers)
        assert right and all(0 <= i < len(answer.options) for i in right)
        assert card.judge(" ".join(LETTERS[i] for i in right)).correct
        assert card.judge(", ".join(LETTERS[i].upper() for i in reversed(right))).correct
        assert not card.judge(" ".join(LETTERS[i] for i in right[:-1])).correct  # one missing
        wrong = [i for i in range(len(answer.options)) if i not in answer.answers]
        assert wrong, f"{card_id}: every option is right; a Several needs a wrong one"
        assert not card.judge(" ".join(LETTERS[i] for i in right + wrong[:1])).correct  # one too many


@pytest.mark.parametrize("card_id", card_ids())
def test_card_message_names_the_answer(card_id):
    card = CARDS[card_id]
    verdict = card.judge("a")
    assert isinstance(verdict, Verdict) and verdict.message


def _float_literals(tree: ast.AST) -> list[ast.Constant]:
    """Float (and complex) constants, except the tolerances rel= and abs= given to Number(...)."""
    allowed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Number":
            allowed.update(id(k.value) for k in node.keywords if k.arg in ("rel", "abs"))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, (float, complex)) and id(node) not in allowed]


@pytest.mark.parametrize("path", CARD_MODULES, ids=lambda p: p.name)
def test_card_modules_type_no_float_but_tolerances(path):
    floats = _float_literals(ast.parse(path.read_text()))
    assert not floats, f"{path.name}: float literals at lines {[f.lineno for f in floats]}: compute them from aisys"


def test_the_float_scan_sees_floats_and_spares_tolerances():
    tree = ast.parse("x = 2.5\ny = Number(3, rel=0.05, abs=0.1)\nz = Number(0.5)\nw = f(rel=0.2)\n")
    assert sorted(f.value for f in _float_literals(tree)) == [0.2, 0.5, 2.5]


# Listing the bank and showing a card that needs no torch, in a fresh interpreter; then a card that does.
WITHOUT_TORCH = """
import sys
from aisys.drill.card import all_cards
from aisys.drill.cli import main
main(["list"])
main(["next", "h100-ridge-point-bf16"])
print("torch after showing a card without it:", "torch" in sys.modules)
all_cards()["ste-gradient-at-the-clamp"].ask
print("torch after showing one with it:", "torch" in sys.modules)
"""


def test_the_bank_is_listed_and_shown_without_importing_torch(tmp_path):
    # torch takes 2 s to import, paid by every command: a card needing a module that imports it imports it inside
    # its function (aisys.drill.card)
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "AISYS_DATA_DIR": str(tmp_path / "history")}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["torch after showing a card without it: False",
                                             "torch after showing one with it: True"], done.stdout[-2000:]


# --------------------------------------------------------------------------- the judges on malformed answers

NUMBER = Number(3.2e12, rel=0.05, unit="FLOP/s")
CHOICE = Choice(("first", "second", "third"), 1)
SEVERAL = Several(("first", "second", "third", "fourth"), frozenset({0, 2}))


@pytest.mark.parametrize("response", ["", "   ", "words", "three", "1e", "1.2.3", "--4", "e5", "nan",
                                      "inf", "0x10", "½", "\n"])
def test_number_judge_explains_a_malformed_answer(response):
    verdict = NUMBER.judge(response)
    assert verdict == Verdict(False, verdict.message)
    assert "answer with a number" in verdict.message and "3.2e+12 FLOP/s" in verdict.message


@pytest.mark.parametrize("response, correct", [("3.2e12", True), ("3.3e12 FLOP/s", True), ("3,200,000,000,000", True),
                                               ("3_200_000_000_000", True), ("+3.2E12", True), ("6.4e12", False),
                                               ("1e999", False), ("-3.2e12", False)])
def test_number_judge_reads_numbers_in_the_usual_forms(response, correct):
    verdict = NUMBER.judge(response)
    assert verdict.correct is correct
    assert "expected 3.2e+12 FLOP/s (within 5%)" in verdict.message


def test_number_judge_uses_the_absolute_tolerance_near_zero():
    near_zero = Number(0.0, rel=0.05, abs=0.01)
    assert near_zero.judge("0.005").correct and not near_zero.judge("0.02").correct
    assert "or 0.01" in near_zero.judge("1").message


@pytest.mark.parametrize("response", ["", " ", "d", "z", "ab", "a b", "1", "second", "b c", "?"])
def test_choice_judge_explains_a_malformed_answer(response):
    verdict = CHOICE.judge(response)
    assert not verdict.correct
    assert "answer with one letter of a, b, c" in verdict.message and "the answer is b) second" in verdict.message


@pytest.mark.parametrize("response, correct", [("b", True), ("B", True), ("b)", True), ("(b)", True), (" b. ", True),
                                               ("a", False), ("c", False)])
def test_choice_judge_reads_one_letter(response, correct):
    verdict = CHOICE.judge(response)
    assert verdict.correct is correct and "the answer is b) second" in verdict.message


@pytest.mark.parametrize("response", ["", "  ", "1 3", "a e", "z", "and", "first, third", "!?"])
def test_several_judge_explains_a_malformed_answer(response):
    verdict = SEVERAL.judge(response)
    assert not verdict.correct
    assert "answer with letters of a, b, c, d" in verdict.message and "the answer is a c" in verdict.message


@pytest.mark.parametrize("response, correct", [("a c", True), ("c a", True), ("A, C", True), ("ac", True),
                                               ("a and c", True), ("a", False), ("a b c", False), ("a c c", True),
                                               ("b d", False)])
def test_several_judge_reads_letters_in_any_order(response, correct):
    verdict = SEVERAL.judge(response)
    assert verdict.correct is correct and "the answer is a c" in verdict.message


def test_a_card_refuses_a_response_that_is_not_text():
    card = next(iter(CARDS.values()))
    with pytest.raises(ValueError, match="expected the answer as text"):
        card.judge(42)
