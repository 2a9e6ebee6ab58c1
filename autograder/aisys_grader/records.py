"""What the grader records beside nbgrader's tables, in the same gradebook database.

`aisys_seeds` holds each assignment's secret seed (hidden inputs derive from it, per
student and notebook, so any grade can be reproduced); `aisys_runs` holds one row per
graded notebook: which submission (by hash), which seed, the score, what the sandbox
enforced and anything that went wrong. Only the grader's process writes here.
"""

import contextlib
import datetime
import hashlib
import json
import secrets

import sqlalchemy as sa

METADATA = sa.MetaData()
SEEDS = sa.Table("aisys_seeds", METADATA,
                 sa.Column("assignment", sa.String(256), primary_key=True),
                 sa.Column("seed", sa.String(64), nullable=False))
RUNS = sa.Table("aisys_runs", METADATA,
                sa.Column("assignment", sa.String(256), primary_key=True),
                sa.Column("student", sa.String(256), primary_key=True),
                sa.Column("notebook", sa.String(256), primary_key=True),
                sa.Column("submission_sha256", sa.String(64), nullable=False),
                sa.Column("seed", sa.String(64), nullable=False),
                sa.Column("score", sa.Float, nullable=False),
                sa.Column("max_score", sa.Float, nullable=False),
                sa.Column("report", sa.Text, nullable=False),  # JSON: checks, notes, sandbox, seconds
                sa.Column("graded_at", sa.DateTime, nullable=False))


@contextlib.contextmanager
def _database(db_url: str):
    """A transaction on the gradebook database, with this module's tables created if missing."""
    engine = sa.create_engine(db_url)
    try:
        METADATA.create_all(engine)
        with engine.begin() as db:
            yield db
    finally:
        engine.dispose()


def assignment_seed(db_url: str, assignment: str, override: int | None = None) -> int:
    """The assignment's secret seed: stored on first use (random unless given), then always the same."""
    with _database(db_url) as db:
        row = db.execute(sa.select(SEEDS.c.seed).where(SEEDS.c.assignment == assignment)).first()
        if row is None:
            seed = override if override is not None else secrets.randbits(63)
            db.execute(SEEDS.insert().values(assignment=assignment, seed=str(seed)))
            return seed
    if override is not None and int(row.seed) != override:
        raise ValueError(f"assignment {assignment!r} was graded with another seed; "
                         "a different --seed would change every student's hidden inputs")
    return int(row.seed)


def notebook_seed(assignment_seed: int, student: str, notebook: str, submission_sha256: str) -> int:
    """The seed of one submission's hidden inputs. They differ between students, so answers cannot be shared,
    and between versions of one student's file, so nothing a grading revealed can be replayed in the next;
    all derive from the assignment's seed and the submitted file, so any grade can be reproduced."""
    digest = hashlib.sha256(f"{assignment_seed}/{student}/{notebook}/{submission_sha256}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def record_run(db_url: str, assignment: str, student: str, notebook: str, result: dict) -> None:
    """Write (or replace) the record of one graded notebook."""
    key = dict(assignment=assignment, student=student, notebook=notebook)
    report = {k: result[k] for k in ("checks", "notes", "enforced", "seconds")}
    with _database(db_url) as db:
        db.execute(RUNS.delete().where(sa.and_(*(RUNS.c[k] == v for k, v in key.items()))))
        db.execute(RUNS.insert().values(**key, submission_sha256=result["submission_sha256"], seed=str(result["seed"]),
                                        score=result["score"], max_score=result["max_score"],
                                        report=json.dumps(report), graded_at=datetime.datetime.now()))


def recorded_run(db_url: str, assignment: str, student: str, notebook: str):
    """The recorded row of one graded notebook, or None."""
    with _database(db_url) as db:
        return db.execute(sa.select(RUNS).where(sa.and_(
            RUNS.c.assignment == assignment, RUNS.c.student == student, RUNS.c.notebook == notebook))).first()
