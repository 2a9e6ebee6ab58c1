"""When each item comes back: FSRS (Ye et al., "A Stochastic Shortest Path Algorithm for Optimizing Spaced
Repetition Scheduling", KDD 2022), through the `fsrs` package, the algorithm's reference implementation.

The learner does not grade themselves: the rating is derived from what the check saw. A fail is Again. A pass is
Easy within half the item's time budget, Good within it and Hard past it, and each hint used lowers it one step,
down to Again (every hint used is close to having been shown the answer)."""

from datetime import datetime, timezone

from fsrs import Card, Rating, Scheduler

# No fuzz: the same history always gives the same schedule, so an exported history replays exactly.
SCHEDULER = Scheduler(enable_fuzzing=False)
STEPS = (Rating.Again, Rating.Hard, Rating.Good, Rating.Easy)


def rating(passed: bool, seconds: float, budget_minutes: float, hints: int) -> Rating:
    """The rating of one attempt (see the module docstring)."""
    if not passed:
        return Rating.Again
    budget = 60 * budget_minutes
    step = 3 if seconds <= budget / 2 else 2 if seconds <= budget else 1
    return STEPS[max(0, step - hints)]


def review(state: str | None, rated: Rating, when: datetime) -> str:
    """The item's FSRS state (JSON; None for an item never reviewed) after a review rated `rated` at `when`."""
    card = Card.from_json(state) if state else Card(card_id=1, due=when)  # one card per item: its id says nothing
    card, _ = SCHEDULER.review_card(card, rated, review_datetime=when.astimezone(timezone.utc))
    return card.to_json()


def due(state: str) -> datetime:
    return Card.from_json(state).due


def now() -> datetime:
    return datetime.now(timezone.utc)
