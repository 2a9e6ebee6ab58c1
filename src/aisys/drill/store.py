"""The learner's history: attempts and the checks run on them, in SQLite, each change one transaction.

An attempt opens when an item is taken (`next`, a hint, or a first check) and closes when a check passes, when a
card is answered, or when the learner gives up; its rating is fixed when it closes (schedule.rating). The schedule
is not stored: it is FSRS replayed over the closed attempts in order (schedule_of), so it can never disagree with
the history, and an imported history schedules exactly as it did where it was made. A process killed at any point
(say, half-way through grading) leaves every attempt either as it was or as one whole transaction made it."""

import json
import os
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from . import schedule

DATA_ENV = "AISYS_DATA_DIR"  # where the history lives, instead of the user's data folder (tests, several profiles)
FORMAT = "aisys-drill-history"
VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    id TEXT PRIMARY KEY,
    item TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('code', 'card')),
    budget_minutes REAL NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    passed INTEGER,
    rating INTEGER,
    hints INTEGER NOT NULL DEFAULT 0,
    mock TEXT,
    file TEXT,
    CHECK ((ended IS NULL) = (passed IS NULL) AND (ended IS NULL) = (rating IS NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS one_open_attempt_per_item ON attempts (item) WHERE ended IS NULL;
CREATE TABLE IF NOT EXISTS checks (
    id TEXT PRIMARY KEY,
    attempt TEXT NOT NULL REFERENCES attempts (id),
    at REAL NOT NULL,
    passed INTEGER NOT NULL,
    failing TEXT,
    seed INTEGER,
    seconds REAL
);
CREATE TABLE IF NOT EXISTS mocks (
    id TEXT PRIMARY KEY,
    started REAL NOT NULL,
    minutes REAL NOT NULL,
    items TEXT NOT NULL,
    folder TEXT
);
"""


def data_dir() -> Path:
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    import platformdirs
    return Path(platformdirs.user_data_dir("aisys", appauthor=False))


@dataclass(frozen=True)
class Attempt:
    id: str
    item: str
    kind: str
    budget_minutes: float
    started: float
    ended: float | None
    passed: bool | None
    rating: int | None
    hints: int
    mock: str | None
    file: str | None

    @property
    def seconds(self) -> float | None:
        return None if self.ended is None else self.ended - self.started


@dataclass(frozen=True)
class Check:
    id: str
    attempt: str
    at: float
    passed: bool
    failing: str | None
    seed: int | None
    seconds: float | None


@dataclass(frozen=True)
class Mock:
    id: str
    started: float
    minutes: float
    items: tuple[str, ...]
    folder: str | None

    @property
    def deadline(self) -> float:
        return self.started + 60 * self.minutes


class History:
    """The history in `folder` (default: data_dir()), created on first use."""

    def __init__(self, folder: Path | None = None):
        self.folder = Path(folder) if folder is not None else data_dir()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / "drills.sqlite3"
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)  # transactions made explicitly
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode = WAL")  # a reader (JupyterLab's magic) never blocks a writer (the CLI)
        self.db.execute("PRAGMA foreign_keys = ON")
        with self.transaction():
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    self.db.execute(statement)

    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()

    def transaction(self):
        return _Transaction(self.db)

    # -- reading --------------------------------------------------------------------------------------------------
    def attempts(self, item: str | None = None) -> list[Attempt]:
        rows = self.db.execute("SELECT * FROM attempts" + (" WHERE item = ?" if item else "") + " ORDER BY started",
                               (item,) if item else ()).fetchall()
        return [_attempt(row) for row in rows]

    def open_attempt(self, item: str) -> Attempt | None:
        row = self.db.execute("SELECT * FROM attempts WHERE item = ? AND ended IS NULL", (item,)).fetchone()
        return _attempt(row) if row else None

    def checks(self, attempt: str | None = None) -> list[Check]:
        rows = self.db.execute("SELECT * FROM checks" + (" WHERE attempt = ?" if attempt else "") + " ORDER BY at",
                               (attempt,) if attempt else ()).fetchall()
        return [Check(r["id"], r["attempt"], r["at"], bool(r["passed"]), r["failing"], r["seed"], r["seconds"])
                for r in rows]

    def schedule_of(self) -> dict[str, str]:
        """Each reviewed item's FSRS state (JSON), replayed from the closed attempts in the order they closed."""
        states: dict[str, str] = {}
        for attempt in sorted((a for a in self.attempts() if a.ended is not None), key=lambda a: (a.ended, a.id)):
            when = datetime.fromtimestamp(attempt.ended, timezone.utc)
            states[attempt.item] = schedule.review(states.get(attempt.item), schedule.Rating(attempt.rating), when)
        return states

    def mocks(self) -> list[Mock]:
        return [Mock(r["id"], r["started"], r["minutes"], tuple(json.loads(r["items"])), r["folder"])
                for r in self.db.execute("SELECT * FROM mocks ORDER BY started")]

    # -- writing: each method one transaction ---------------------------------------------------------------------
    def start(self, item: str, kind: str, budget_minutes: float, when: float, *, file: str | None = None,
              mock: str | None = None) -> Attempt:
        """The item's open attempt, opened now if there is none (the clock of an open one keeps running)."""
        with self.transaction():
            return self._start(item, kind, budget_minutes, when, file, mock)

    def _start(self, item, kind, budget_minutes, when, file=None, mock=None) -> Attempt:
        current = self.open_attempt(item)
        if current is None:
            self.db.execute("INSERT INTO attempts (id, item, kind, budget_minutes, started, file, mock) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (uuid.uuid4().hex, item, kind, budget_minutes, when, file, mock))
        elif file is not None or mock is not None:
            self.db.execute("UPDATE attempts SET file = coalesce(?, file), mock = coalesce(?, mock) WHERE id = ?",
                            (file, mock, current.id))
        return self.open_attempt(item)

    def use_hint(self, item: str, kind: str, budget_minutes: float, when: float) -> Attempt:
        with self.transaction():
            attempt = self._start(item, kind, budget_minutes, when)
            self.db.execute("UPDATE attempts SET hints = hints + 1 WHERE id = ?", (attempt.id,))
            return self.open_attempt(item)

    def record_check(self, item: str, kind: str, budget_minutes: float, when: float, *, passed: bool,
                     failing: str | None = None, seed: int | None = None, seconds: float | None = None,
                     close: bool = False) -> Attempt:
        """Record one check of the item's open attempt (opened now if none). A pass closes the attempt, rated from
        its time and hints; so does any answer when `close` (a card is answered once)."""
        with self.transaction():
            attempt = self._start(item, kind, budget_minutes, when)
            self.db.execute("INSERT INTO checks (id, attempt, at, passed, failing, seed, seconds) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (uuid.uuid4().hex, attempt.id, when, int(passed), failing, seed, seconds))
            if passed or close:
                self._close(attempt, when, passed)
            return _attempt(self.db.execute("SELECT * FROM attempts WHERE id = ?", (attempt.id,)).fetchone())

    def give_up(self, item: str, when: float) -> Attempt | None:
        """Close the item's open attempt as failed (rated Again); None when none was open."""
        with self.transaction():
            attempt = self.open_attempt(item)
            if attempt is not None:
                self._close(attempt, when, False)
            return attempt

    def _close(self, attempt: Attempt, when: float, passed: bool) -> None:
        rated = schedule.rating(passed, when - attempt.started, attempt.budget_minutes, attempt.hints)
        self.db.execute("UPDATE attempts SET ended = ?, passed = ?, rating = ? WHERE id = ?",
                        (when, int(passed), int(rated), attempt.id))

    def start_mock(self, items: list[tuple[str, str, float]], minutes: float, when: float,
                   folder: str | None) -> Mock:
        """A mock interview: every item (id, kind, budget) opened now under one time limit."""
        with self.transaction():
            mock = Mock(uuid.uuid4().hex, when, minutes, tuple(i for i, _, _ in items), folder)
            self.db.execute("INSERT INTO mocks (id, started, minutes, items, folder) VALUES (?, ?, ?, ?, ?)",
                            (mock.id, when, minutes, json.dumps(mock.items), folder))
            for item, kind, budget in items:
                if self.open_attempt(item) is not None:  # a mock starts every clock afresh
                    self._close(self.open_attempt(item), when, False)
                self._start(item, kind, budget, when, mock=mock.id)
            return mock

    # -- moving a history between machines ------------------------------------------------------------------------
    def export(self) -> dict:
        tables = {name: [dict(row) for row in self.db.execute(f"SELECT * FROM {name} ORDER BY rowid")]
                  for name in ("attempts", "checks", "mocks")}
        return {"format": FORMAT, "version": VERSION, **tables}

    def import_(self, data) -> dict[str, int]:
        """Add what `data` (an export) holds and this history lacks, in one transaction; the counts added. An item
        open here and in `data` keeps this history's open attempt."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"history: expected an export of `aisys drill export` (format {FORMAT!r})")
        if data.get("version") != VERSION:
            raise ValueError(f"history: expected version {VERSION}, got {data.get('version')!r}")
        added = {}
        with self.transaction():
            for table in ("attempts", "checks", "mocks"):
                rows = data.get(table, [])
                if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                    raise ValueError(f"history: {table} must be a list of records")
                columns = [r[1] for r in self.db.execute(f"PRAGMA table_info({table})")]
                before = self.db.total_changes
                for row in rows:
                    if set(row) != set(columns):
                        raise ValueError(f"history: a record of {table} must have the fields {columns}, got "
                                         f"{sorted(row)}")
                    open_here = table == "attempts" and row["ended"] is None and self.open_attempt(row["item"])
                    if not open_here:
                        self.db.execute(f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) "
                                        f"VALUES ({', '.join('?' * len(columns))})", [row[c] for c in columns])
                added[table] = self.db.total_changes - before
        return added

    def integrity(self) -> list[str]:
        """What is wrong with the file, or []: SQLite's own check, and checks whose attempt is missing."""
        problems = [row[0] for row in self.db.execute("PRAGMA integrity_check") if row[0] != "ok"]
        problems += [f"check {row[0]} of a missing attempt" for row in self.db.execute(
            "SELECT id FROM checks WHERE attempt NOT IN (SELECT id FROM attempts)")]
        return problems


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception: all of a change or none of it."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, *_):
        self.db.execute("ROLLBACK" if kind else "COMMIT")


def _attempt(row) -> Attempt:
    return Attempt(row["id"], row["item"], row["kind"], row["budget_minutes"], row["started"], row["ended"],
                   None if row["passed"] is None else bool(row["passed"]), row["rating"], row["hints"], row["mock"],
                   row["file"])
