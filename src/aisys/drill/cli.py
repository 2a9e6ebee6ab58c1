"""`aisys drill`: list, take, check and schedule interview drills, from a terminal (and, through magic.py, from a
notebook: the same commands, the same history)."""

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from . import bank, files, schedule
from .store import History
from .tags import DIFFICULTIES, FREQUENCIES, LANGUAGES, TOPICS


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="aisys drill", description="Interview drills: timed coding problems and "
                                   "concept cards, checked offline, with a history and spaced repetition (FSRS).")
    commands = main.add_subparsers(dest="action", required=True)

    def filters(command):
        command.add_argument("--topic", choices=TOPICS)
        command.add_argument("--difficulty", choices=DIFFICULTIES)
        command.add_argument("--language", choices=LANGUAGES, help="a coding drill's language (cards have none)")
        command.add_argument("--kind", choices=("code", "card"))
        command.add_argument("--frequency", choices=FREQUENCIES, help="how often interviews ask it")

    listing = commands.add_parser("list", help="the bank, with each item's schedule")
    filters(listing)
    listing.add_argument("--due", action="store_true", help="only items due for review now")
    take = commands.add_parser("next", help="take an item (the one due first, or ID): write its file, start its clock")
    take.add_argument("id", nargs="?", help="this item instead of the scheduler's choice")
    filters(take)
    take.add_argument("--out", type=Path, help="where to write a coding drill (default: ./drill_<id>.py)")
    take.add_argument("--notebook", action="store_true", help="write the drill's notebook instead of a Python file")
    take.add_argument("--force", action="store_true", help="overwrite the file if it exists")
    grade = commands.add_parser("check", help="check an attempt and record it (exit 0 passed, 1 failed)")
    grade.add_argument("id")
    grade.add_argument("file", nargs="?", type=Path, help="a coding drill's attempt (default: the file `next` wrote)")
    grade.add_argument("--answer", help="a card's answer (default: asked for)")
    grade.add_argument("--seed", type=int, help="the hidden cases' seed (default: fresh each check)")
    hint = commands.add_parser("hint", help="the next hint of a coding drill; each lowers the rating one step")
    hint.add_argument("id")
    give_up = commands.add_parser("give-up", help="close the item's attempt as failed (it comes back soon)")
    give_up.add_argument("id")
    stats = commands.add_parser("stats", help="history, due items, and time-to-pass per topic")
    stats.add_argument("--plot", type=Path, help="also draw time-to-pass per topic into this PNG file")
    mock = commands.add_parser("mock", help="a mock interview: N items, code and cards, one time limit for all")
    filters(mock)
    mock.add_argument("-n", type=int, default=4, help="how many items (default 4)")
    mock.add_argument("--minutes", type=float, help="the time limit (default: the items' budgets added up)")
    mock.add_argument("--folder", type=Path, default=Path("mock"), help="where its files go (default ./mock)")
    mock.add_argument("--status", action="store_true", help="the current mock's items, results and time left")
    mock.add_argument("--end", action="store_true", help="end the current mock: what is open counts as failed")
    export = commands.add_parser("export", help="write the history as JSON (- for standard output)")
    export.add_argument("file", type=Path)
    load = commands.add_parser("import", help="add a history exported elsewhere to this one")
    load.add_argument("file", type=Path)
    return main


def main(argv: list[str] | None = None, *, code: str | None = None, out=None) -> int:
    """Run one command; `code` is an attempt given as text (the %%drill magic's cell), `out` where to print."""
    out = out or sys.stdout
    args = parser().parse_args(argv)
    say = lambda *parts: print(*parts, file=out)  # noqa: E731
    try:
        with History() as history:
            return ACTIONS[args.action](args, history, say, code)
    except (ValueError, OSError) as error:
        print(f"aisys drill: error: {error}", file=sys.stderr)
        return 2


def _filters(args) -> dict:
    return {key: getattr(args, key) for key in ("topic", "difficulty", "language", "kind", "frequency")}


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def _day(when: datetime) -> str:
    return when.astimezone().strftime("%Y-%m-%d %H:%M")


def _status(item: bank.Item, states: dict, history: History, now: datetime) -> str:
    if history.open_attempt(item.id) is not None:
        return "open"
    if item.id not in states:
        return "new"
    due = schedule.due(states[item.id])
    return "due now" if due <= now else f"due {_day(due)}"


def do_list(args, history: History, say, _code) -> int:
    states, now = history.schedule_of(), schedule.now()
    chosen = bank.select(**_filters(args))
    if args.due:
        chosen = [i for i in chosen if i.id in states and schedule.due(states[i.id]) <= now]
    say(f"{'id':24} {'kind':5} {'topic':16} {'difficulty':10} {'frequency':9} {'language':8} {'budget':>6}  status")
    for item in chosen:
        say(f"{item.id:24} {item.kind:5} {item.topic:16} {item.difficulty:10} {item.frequency:9} "
            f"{item.language or '-':8} {item.budget_minutes:>3} min  {_status(item, states, history, now)}")
    code = sum(i.kind == "code" for i in chosen)
    say(f"{code} coding drills and {len(chosen) - code} cards")
    return 0


def pick(candidates: list[bank.Item], history: History, now: datetime) -> bank.Item | None:
    """What to take next: the most overdue item, else a new one (the most asked, then the easiest), else the one
    due soonest; never one with an open attempt."""
    states = history.schedule_of()
    candidates = [i for i in candidates if history.open_attempt(i.id) is None]
    due = sorted((schedule.due(states[i.id]), i.id, i) for i in candidates if i.id in states)
    if due and due[0][0] <= now:
        return due[0][2]
    new = [i for i in candidates if i.id not in states]
    if new:
        return min(new, key=lambda i: (FREQUENCIES.index(i.frequency), DIFFICULTIES.index(i.difficulty), i.id))
    return due[0][2] if due else None


def _take(item: bank.Item, history: History, say, *, path: Path | None, notebook: bool, force: bool,
          mock: str | None = None) -> None:
    """Write a coding drill's file (or show a card) and start its clock."""
    if item.kind == "card":
        history.start(item.id, "card", item.budget_minutes, time.time(), mock=mock)
        _show_card(item, say)
        return
    path = path or files.default_path(item, notebook)
    written = files.write(item, path, notebook=notebook, force=force)
    attempt = history.start(item.id, "code", item.budget_minutes, time.time(), file=str(Path(path).resolve()),
                            mock=mock)
    say(f"{item.id}: {item.title} ({item.topic}, {item.difficulty}, {item.language}); budget {item.budget_minutes} "
        f"min, clock started {_day(datetime.fromtimestamp(attempt.started, timezone.utc))}")
    say(f"  {'wrote' if written else 'kept your'} {path}; check it with `aisys drill check {item.id}`")


def _show_card(item: bank.Item, say) -> None:
    ask = item.card.ask
    say(f"{item.id} ({item.topic}, {item.difficulty}; budget {item.budget_minutes} min)\n{ask.question}")
    for letter, option in zip("abcdefghij", getattr(ask.answer, "options", ())):
        say(f"  {letter}) {option}")
    say(f"Answer with `aisys drill check {item.id} --answer ...`")


def do_next(args, history: History, say, _code) -> int:
    if args.id:
        item = bank.find_item(args.id)
    else:
        item = pick(bank.select(**_filters(args)), history, schedule.now())
        if item is None:
            say("nothing to take: every item matching these filters has an open attempt")
            return 0
    _take(item, history, say, path=args.out, notebook=args.notebook, force=args.force)
    return 0


def do_check(args, history: History, say, code: str | None) -> int:
    item = bank.find_item(args.id)
    if item.kind == "card":
        answer = args.answer
        if answer is None and code is not None:  # the magic's cell: its lines that are not comments
            answer = " ".join(line.strip() for line in code.splitlines() if line.strip()[:1] not in ("", "#"))
        if answer is None:
            try:
                answer = input(f"{item.card.ask.question}\nyour answer: ")
            except EOFError:  # no terminal to ask in
                raise ValueError(f"--answer: give {item.id}'s answer, as --answer 42 or --answer b") from None
        verdict = item.card.judge(answer)
        attempt = history.record_check(item.id, "card", item.budget_minutes, time.time(), passed=verdict.correct,
                                       failing=None if verdict.correct else f"answered {answer!r}", close=True)
        say(f"{item.id}: {'right' if verdict.correct else 'wrong'}: {verdict.message}")
        say(item.card.ask.explanation)
        if item.page:
            say(f"(taught in the book's {item.page})")
        _after(item, attempt, history, say)
        return 0 if verdict.correct else 1

    from .grading import check_code
    path = args.file
    if code is not None:
        path = _code_file(history, item, code)
    elif path is None:
        attempt = history.open_attempt(item.id)
        if attempt is None or not attempt.file:
            raise ValueError(f"file: {item.id} has no attempt file; give one, or take it with "
                             f"`aisys drill next {item.id}`")
        path = Path(attempt.file)
    if not Path(path).is_file():
        raise ValueError(f"file: {path} is not a file")
    outcome = check_code(item, Path(path), seed=args.seed)
    if outcome.skipped:
        say(f"{item.id}: not checked here: {', '.join(outcome.skipped)} need a GPU; nothing was recorded")
        return 1
    attempt = history.record_check(item.id, "code", item.budget_minutes, time.time(), passed=outcome.passed,
                                   failing=outcome.failing, seed=outcome.seed, seconds=outcome.seconds)
    say(f"{item.id}: {'passed' if outcome.passed else 'failed'} ({outcome.score:g} of {outcome.max_score:g} points; "
        f"checked in {outcome.seconds:.1f} s, hidden cases from seed {outcome.seed})")
    if outcome.failing:
        say(f"  first failure: {outcome.failing}")
    for error in outcome.raised:
        say(f"  your code raised {error}")
    for note in outcome.notes:
        say(f"  note: {note}")
    _after(item, attempt, history, say)
    return 0 if outcome.passed else 1


def _code_file(history: History, item: bank.Item, code: str) -> Path:
    """Where the magic's cell is kept while it is checked: beside the history, one file per drill."""
    path = history.folder / "cells" / f"drill_{item.id}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(code)
    return path


def _after(item: bank.Item, attempt, history: History, say) -> None:
    """What the check did to the attempt and the schedule."""
    if attempt.ended is None:
        say(f"  the clock runs: {_clock(time.time() - attempt.started)} of {item.budget_minutes} min, "
            f"{attempt.hints} hint{'s' * (attempt.hints != 1)} used"
            + (f"; `aisys drill hint {item.id}` for one" if item.kind == "code" else ""))
        return
    rated = schedule.Rating(attempt.rating).name
    due = schedule.due(history.schedule_of()[item.id])
    say(f"  recorded: {_clock(attempt.seconds)} against a budget of {item.budget_minutes} min, {attempt.hints} "
        f"hint{'s' * (attempt.hints != 1)}: "
        f"rated {rated}; it comes back {_day(due)}")


def do_hint(args, history: History, say, _code) -> int:
    item = bank.find_item(args.id)
    if item.kind == "card":
        say(f"cards have no hints; the page that teaches it: {item.page}")
        return 0
    from aisys_grader.exercise import find
    hints = find(item.exercise).spec.drill.hints
    attempt = history.use_hint(item.id, "code", item.budget_minutes, time.time())
    shown = min(attempt.hints, len(hints))
    say(f"hint {shown} of {len(hints)}: {hints[shown - 1]}")
    if attempt.hints > len(hints):
        say("(that was the last hint; each one asked for still lowers the rating)")
    return 0


def do_give_up(args, history: History, say, _code) -> int:
    item = bank.find_item(args.id)
    attempt = history.give_up(item.id, time.time())
    if attempt is None:
        say(f"{item.id} has no open attempt")
        return 0
    say(f"{item.id}: given up after {_clock(time.time() - attempt.started)}; rated Again, it comes back "
        f"{_day(schedule.due(history.schedule_of()[item.id]))}")
    return 0


def do_stats(args, history: History, say, _code) -> int:
    attempts, states, now = history.attempts(), history.schedule_of(), schedule.now()
    items = bank.items()
    closed = [a for a in attempts if a.ended is not None]
    passed = [a for a in closed if a.passed]
    say(f"{len(closed)} attempts closed ({len(passed)} passed), {len(attempts) - len(closed)} open; "
        f"{len(states)} of {len(items)} items seen")
    say(f"{'topic':16} {'attempts':>8} {'passed':>6} {'median time to pass':>20}")
    topics = sorted({items[a.item].topic for a in attempts if a.item in items})
    for topic in topics:
        mine = [a for a in closed if a.item in items and items[a.item].topic == topic]
        times = sorted(a.seconds for a in mine if a.passed)
        median = _clock(times[len(times) // 2]) if times else "-"
        say(f"{topic:16} {len(mine):>8} {sum(a.passed for a in mine):>6} {median:>20}")
    due = sorted((schedule.due(s), i) for i, s in states.items() if schedule.due(s) <= now)
    say(f"due now: {', '.join(i for _, i in due) or 'nothing'}")
    if args.plot:
        plot(history, args.plot)
        say(f"wrote {args.plot}")
    return 0


def plot(history: History, path: Path) -> None:
    """Time to pass, per topic, attempt after attempt."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = bank.items()
    passed = [a for a in history.attempts() if a.passed and a.item in items]
    figure, axes = plt.subplots(figsize=(7, 4))
    for topic in sorted({items[a.item].topic for a in passed}):
        mine = [a for a in passed if items[a.item].topic == topic]
        axes.plot(range(1, len(mine) + 1), [a.seconds / 60 for a in mine], marker="o", label=topic)
    axes.set_xlabel("passing attempt, in order")
    axes.set_ylabel("minutes to pass")
    axes.set_title("Time to pass, per topic")
    if passed:
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def do_mock(args, history: History, say, _code) -> int:
    mocks = history.mocks()
    current = mocks[-1] if mocks else None
    if args.status or args.end:
        if current is None:
            raise ValueError("mock: none has been started; start one with `aisys drill mock`")
        if args.end:
            for item in current.items:
                attempt = history.open_attempt(item)
                if attempt is not None and attempt.mock == current.id:
                    history.give_up(item, time.time())
        return _mock_report(current, history, say)
    if args.n < 1:
        raise ValueError(f"-n: expected a number of items >= 1, got {args.n}")
    now = schedule.now()
    candidates = bank.select(**_filters(args))
    chosen: list[bank.Item] = []
    for kind in ["code", "card"] * args.n:  # alternate code and cards while both last
        if len(chosen) == args.n:
            break
        left = [i for i in candidates if i.kind == kind and i not in chosen] or [i for i in candidates
                                                                                 if i not in chosen]
        item = pick(left, history, now) or (left[0] if left else None)
        if item is not None:
            chosen.append(item)
    if not chosen:
        raise ValueError("mock: no item matches these filters")
    minutes = args.minutes or sum(i.budget_minutes for i in chosen)
    mock = history.start_mock([(i.id, i.kind, i.budget_minutes) for i in chosen], minutes, time.time(),
                              str(args.folder.resolve()))
    say(f"mock interview: {len(chosen)} items, {minutes:g} min for all; it ends "
        f"{_day(datetime.fromtimestamp(mock.deadline, timezone.utc))}")
    for item in chosen:
        if item.kind == "code":
            _take(item, history, say, path=files.default_path(item, False, args.folder), notebook=False,
                  force=True, mock=mock.id)
        else:
            _show_card(item, say)
    say("`aisys drill mock --status` for the time left, `aisys drill mock --end` to finish")
    return 0


def _mock_report(mock, history: History, say) -> int:
    left = mock.deadline - time.time()
    say(f"mock of {_day(datetime.fromtimestamp(mock.started, timezone.utc))}: "
        + (f"{_clock(left)} left" if left > 0 else "time is up"))
    score = 0
    for item in mock.items:
        attempt = next((a for a in history.attempts(item) if a.mock == mock.id), None)
        if attempt is None or attempt.ended is None:
            state = "open"
        elif attempt.passed and attempt.ended <= mock.deadline:
            state, score = f"passed in {_clock(attempt.seconds)}", score + 1
        else:
            state = "passed after the time limit" if attempt.passed else "failed"
        say(f"  {item:24} {state}")
    say(f"{score} of {len(mock.items)} within the time limit")
    return 0


def do_export(args, history: History, say, _code) -> int:
    text = json.dumps(history.export(), indent=1)
    if str(args.file) == "-":
        say(text)
    else:
        args.file.write_text(text)
        say(f"wrote {args.file}: {len(history.attempts())} attempts")
    return 0


def do_import(args, history: History, say, _code) -> int:
    try:
        data = json.loads(args.file.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"file: {args.file} is not JSON ({error})") from None
    added = history.import_(data)
    say(f"imported {args.file}: " + ", ".join(f"{n} {table}" for table, n in added.items()) + " added")
    return 0


ACTIONS = {"list": do_list, "next": do_next, "check": do_check, "hint": do_hint, "give-up": do_give_up,
           "stats": do_stats, "mock": do_mock, "export": do_export, "import": do_import}
