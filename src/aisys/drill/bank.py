"""The bank: every coding drill and concept card, as items listed, filtered and picked the same way.

A coding drill is an exercise whose spec.toml has a [drill] table (in any chapter: later chapters add theirs);
its id is the exercise's folder name. A card's id is its function's name (card.py). Ids are unique across both.
"""

from dataclasses import dataclass
from functools import cache

from .card import Card, all_cards
from .tags import CARD_MINUTES, DIFFICULTIES, DRILL_MINUTES, FREQUENCIES, LANGUAGES, TOPICS


@dataclass(frozen=True)
class Item:
    id: str
    kind: str  # "code" or "card"
    title: str
    topic: str
    difficulty: str
    frequency: str
    language: str | None  # a coding drill's; None for a card
    page: str | None  # the book page that teaches it
    exercise: str | None = None  # a coding drill's exercise id, '<chapter>/<name>'

    @property
    def budget_minutes(self) -> int:
        return (DRILL_MINUTES if self.kind == "code" else CARD_MINUTES)[self.difficulty]

    @property
    def card(self) -> Card:
        return all_cards()[self.id]


@cache
def _drills() -> list[Item]:
    from aisys_grader.exercise import exercise_ids, find

    drills = []
    for exercise in exercise_ids():
        spec = find(exercise).spec
        if spec.drill is not None:
            drill = spec.drill
            drills.append(Item(exercise.split("/")[1], "code", spec.title, drill.topic, drill.difficulty,
                               drill.frequency, drill.language, spec.page, exercise))
    return drills


@cache
def items() -> dict[str, Item]:
    """Every item by id: the coding drills, then the cards."""
    # a card's title is its id in words: its question is computed only when it is shown
    found = _drills() + [Item(c.id, "card", c.id.replace("-", " "), c.topic, c.difficulty, c.frequency, None, c.page)
                         for c in all_cards().values()]
    bank: dict[str, Item] = {}
    for item in found:
        if item.id in bank:
            raise ValueError(f"two items of the drill bank are called {item.id!r}: "
                             f"{bank[item.id].exercise or 'a card'} and {item.exercise or 'a card'}")
        bank[item.id] = item
    return bank


def find_item(item_id: str) -> Item:
    """The item called `item_id`; a ValueError naming the nearest ids where there is none."""
    drill = next((i for i in _drills() if i.id == item_id), None)
    if drill is not None:  # without importing the cards: a check of a drill starts sooner
        return drill
    bank = items()
    if not isinstance(item_id, str) or item_id not in bank:
        import difflib
        near = difflib.get_close_matches(str(item_id), bank, n=4, cutoff=0.5)
        raise ValueError(f"drill: no item {item_id!r} in the bank" + (f"; did you mean {', '.join(near)}?" if near
                                                                       else "; `aisys drill list` lists them"))
    return bank[item_id]


def select(*, topic: str | None = None, difficulty: str | None = None, language: str | None = None,
           kind: str | None = None, frequency: str | None = None) -> list[Item]:
    """The items matching every filter given; an unknown filter value is an error naming the choices."""
    for name, value, choices in (("topic", topic, TOPICS), ("difficulty", difficulty, DIFFICULTIES),
                                 ("language", language, LANGUAGES), ("kind", kind, ("code", "card")),
                                 ("frequency", frequency, FREQUENCIES)):
        if value is not None and value not in choices:
            raise ValueError(f"{name}: expected one of {', '.join(choices)}; got {value!r}")
    return [item for item in items().values()
            if (topic is None or item.topic == topic) and (difficulty is None or item.difficulty == difficulty)
            and (language is None or item.language == language) and (kind is None or item.kind == kind)
            and (frequency is None or item.frequency == frequency)]
