"""Concept cards: a question whose answer is checked automatically, with a worked explanation and its book page.

A card is written as a function that computes everything it states from aisys (hardware tables, cost models),
registered with @card:

    @card(topic="memory access", difficulty="easy", frequency="high", page="01-architecture/roofline")
    def h100_ridge_point():
        chip = CHIPS["H100 SXM"]
        ridge = chip.peak_flops("fp16") / chip.hbm_bandwidth
        return Ask(f"At what arithmetic intensity does ... ?", Number(ridge, rel=0.1, unit="FLOP/byte"),
                   f"The ridge is peak over bandwidth: ... = {ridge:.0f} FLOP/byte.")

The function runs when the card is shown, so a card never states a number that aisys does not hold. Its name
(the function's, with _ as -) is its id. A module of aisys that imports torch (2 s) is imported inside the functions
that use it, not at the top of the card's module: every command lists the bank, and only a card that needs torch
pays for it, when it is shown.
"""

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from aisys._validate import one_of

from .tags import CARD_MINUTES, DIFFICULTIES, FREQUENCIES, TOPICS



@dataclass(frozen=True)
class Verdict:
    correct: bool
    message: str  # what was expected, said after any answer


@dataclass(frozen=True)
class Number:
    """A number, right within a relative tolerance `rel` (and an absolute one `abs`, for answers near 0)."""

    value: float
    rel: float = 0.05
    abs: float = 0.0
    unit: str = ""

    def judge(self, response: str) -> Verdict:
        expected = f"{self.value:.4g}{' ' + self.unit if self.unit else ''}"
        # a number, with thousands separated by commas or _ if at all, and any unit after it ("128KiB", "14.8x"),
        # but not a dangling exponent ("1e") nor hexadecimal ("0x10")
        match = re.match(r"\s*([-+]?(?:\d{1,3}(?:[,_]\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?)"
                         r"(?![\d.,_]|[eE](?![a-zA-Z])|[xX][0-9a-fA-F])", response)
        if match is None or not re.match(r"[-+]?\.?\d", match.group(1)):
            return Verdict(False, f"answer with a number (as 3.2 or 3.2e12); expected {expected}")
        got = float(match.group(1).replace(",", "").replace("_", ""))
        right = math.isclose(got, self.value, rel_tol=self.rel, abs_tol=self.abs)
        within = " or ".join(([f"{self.rel:.0%}"] if self.rel else []) + ([f"{self.abs:g}"] if self.abs else []))
        within = f"within {within}" if within else "exactly"
        return Verdict(right, f"expected {expected} ({within}), got {got:g}")


@dataclass(frozen=True)
class Choice:
    """One right option of several: answered by its letter (a, b, ...)."""

    options: tuple[str, ...]
    answer: int  # the index of the right option

    def judge(self, response: str) -> Verdict:
        letters = "abcdefghij"[:len(self.options)]
        text = response.strip().lower().strip("().")
        right = f"{letters[self.answer]}) {self.options[self.answer]}"
        if len(text) != 1 or text not in letters:
            return Verdict(False, f"answer with one letter of {', '.join(letters)}; the answer is {right}")
        return Verdict(letters.index(text) == self.answer, f"the answer is {right}")


@dataclass(frozen=True)
class Several:
    """Every right option of several, and none of the others: answered by their letters (as "a c")."""

    options: tuple[str, ...]
    answers: frozenset[int]

    def judge(self, response: str) -> Verdict:
        letters = "abcdefghij"[:len(self.options)]
        words = re.findall(r"[a-z]+", response.lower())  # "a c", "a, c", "a and c", or "ac"
        picked = list(words[0]) if len(words) == 1 else [w for w in words if len(w) == 1]
        right = " ".join(letters[i] for i in sorted(self.answers))
        if not picked or any(p not in letters for p in picked):
            return Verdict(False, f"answer with letters of {', '.join(letters)}, as \"a c\"; the answer is {right}")
        return Verdict({letters.index(p) for p in picked} == set(self.answers), f"the answer is {right}")


Answer = Number | Choice | Several


@dataclass(frozen=True)
class Ask:
    """What a card's function returns: the question, its answer and the worked explanation."""

    question: str
    answer: Answer
    explanation: str


@dataclass(frozen=True)
class Card:
    id: str
    topic: str
    difficulty: str
    frequency: str
    page: str  # the book page that teaches it, as in book/_toc.yml (e.g. "02-gpu-programming/memory")
    make: Callable[[], Ask] = field(repr=False, compare=False)

    @cached_property
    def ask(self) -> Ask:
        return self.make()

    @property
    def budget_minutes(self) -> int:
        return CARD_MINUTES[self.difficulty]

    def judge(self, response: str) -> Verdict:
        if not isinstance(response, str):
            raise ValueError(f"response: expected the answer as text, got {type(response).__name__}")
        return self.ask.answer.judge(response)


CARDS: dict[str, Card] = {}


def card(*, topic: str, difficulty: str, frequency: str, page: str):
    """Register a card function (see the module docstring)."""
    one_of("topic", topic, TOPICS)
    one_of("difficulty", difficulty, DIFFICULTIES)
    one_of("frequency", frequency, FREQUENCIES)

    def register(make: Callable[[], Ask]) -> Callable[[], Ask]:
        name = make.__name__.replace("_", "-")
        if name in CARDS:
            raise ValueError(f"card {name!r} is defined twice ({make.__module__} and {CARDS[name].make.__module__})")
        CARDS[name] = Card(name, topic, difficulty, frequency, page, make)
        return make
    return register


def all_cards() -> dict[str, Card]:
    """Every card, by id: the modules of aisys.drill.cards, imported."""
    import importlib
    import pkgutil

    from . import cards
    for module in pkgutil.iter_modules(cards.__path__):
        importlib.import_module(f"{cards.__name__}.{module.name}")
    return CARDS
