"""Exercises: one folder each, whose path is the exercise's id, '<chapter>/<name>'.

    solutions/<chapter>/<name>/
        notebook.py          the jupytext source: the student's notebook, with the solution in it
        checks.py            the checks, each `@check(points=...)` (aisys_grader.checks)
        wrong_answers.toml   known-wrong answers, as edits of the solution (aisys_grader.wrong)
        spec.toml            what the exercise declares (Spec)

`solutions/` is installed as the package `aisys_exercises`: an exercise's checks are the module
`aisys_exercises.<chapter>.<name>.checks`, found through the package's path, so tests may add a
folder of exercises of their own to it. Nothing repeats the id: it is read from the folder.
"""

import ast
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import aisys_exercises
from aisys.drill.tags import DIFFICULTIES, DRILL_MINUTES, FREQUENCIES, LANGUAGES, TOPICS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PACKAGE = aisys_exercises.__name__
ID = re.compile(r"(?P<chapter>\d\d-[a-z0-9]+(?:-[a-z0-9]+)*)/(?P<name>[a-z][a-z0-9_]*)")
SPEC_KEYS = {"title": str, "page": str, "gpus": int, "reference": list, "student_may_import": list, "clean_room": list,
             "drill": dict}
REQUIRED = ("title", "gpus", "reference", "student_may_import")
# An interview drill (chapter 9 and any chapter's drills) says so in a [drill] table of its spec.toml.
DRILL_KEYS = {"topic": str, "difficulty": str, "frequency": str, "language": str, "problem": str, "hints": list}
DRILL_REQUIRED = ("topic", "difficulty", "frequency", "language", "hints")


@dataclass(frozen=True)
class Drill:
    """What a drill's [drill] table declares: how it is listed, timed and scheduled, and its hints."""

    topic: str  # one of aisys.drill.tags.TOPICS, as every tag here
    difficulty: str  # the time budget is DRILL_MINUTES of it
    frequency: str
    language: str  # one of LANGUAGES: what the attempt is written in
    problem: str  # the problem it poses: drills of one problem in several languages share it
    hints: tuple[str, ...]  # a ladder, from a nudge to nearly the answer: at least two

    @property
    def budget_minutes(self) -> int:
        return DRILL_MINUTES[self.difficulty]


@dataclass(frozen=True)
class Spec:
    """What an exercise declares in its spec.toml."""

    title: str  # as in the notebook's heading, "Exercise: <title>"
    gpus: int  # GPUs needed to grade every check: 0 where every check runs on a CPU
    reference: tuple[str, ...]  # aisys modules holding the answers: never in a grading kernel
    student_may_import: tuple[str, ...]  # the only aisys modules a grading kernel holds (with what they import)
    page: str | None = None  # the book page that teaches it, as in book/_toc.yml
    clean_room: tuple[str, ...] = ()  # what kernels and rank functions may import in the clean room (cleanroom.py)
    drill: Drill | None = None  # an interview drill's listing, budget and hints


@dataclass(frozen=True)
class Exercise:
    id: str
    folder: Path

    @property
    def chapter(self) -> str:
        return self.id.split("/")[0]

    @property
    def name(self) -> str:
        return self.id.split("/")[1]

    @property
    def notebook(self) -> Path:
        return self.folder / "notebook.py"

    @property
    def checks(self) -> Path:
        return self.folder / "checks.py"

    @property
    def wrong_answers(self) -> Path:
        return self.folder / "wrong_answers.toml"

    @property
    def module(self) -> str:
        return module_name(self.id)

    @property
    def spec(self) -> Spec:
        return read_spec(self.folder / "spec.toml")


def check_id(exercise: str) -> re.Match:
    match = ID.fullmatch(exercise) if isinstance(exercise, str) else None
    if match is None:
        raise ValueError(f"exercise: expected '<NN-chapter>/<name>' (as 07-inference/kv_cache), got {exercise!r}")
    return match


def module_name(exercise: str) -> str:
    """'07-inference/kv_cache' -> 'aisys_exercises.07-inference.kv_cache.checks'."""
    check_id(exercise)
    return f"{PACKAGE}.{exercise.replace('/', '.')}.checks"


def exercise_of_module(module: str) -> str:
    """The id of the exercise whose checks are `module` (the inverse of module_name)."""
    parts = module.split(".")
    if len(parts) != 4 or parts[0] != PACKAGE or parts[3] != "checks":
        raise ValueError(f"checks are registered from an exercise's checks.py ({PACKAGE}.<chapter>.<name>.checks), "
                         f"not from {module!r}; elsewhere pass exercise= to @check")
    return check_id(f"{parts[1]}/{parts[2]}").group(0)


def roots() -> list[Path]:
    """Folders of exercises: the course's first, then any a test added to the package's path."""
    return [Path(p) for p in aisys_exercises.__path__]


def course_root() -> Path:
    return roots()[0]


def exercise_ids(root: Path | None = None) -> list[str]:
    """Every exercise in `root` (default: the course), as '<chapter>/<name>': each folder with a spec.toml."""
    root = course_root() if root is None else Path(root)
    return sorted(f"{p.parent.parent.name}/{p.parent.name}" for p in root.glob("*/*/spec.toml")
                  if ID.fullmatch(f"{p.parent.parent.name}/{p.parent.name}"))


def find(exercise: str) -> Exercise:
    """The exercise with this id, from the first folder of exercises that holds it."""
    check_id(exercise)
    for root in roots():
        if (root / exercise / "spec.toml").is_file():
            return Exercise(exercise, root / exercise)
    known = exercise_ids()
    raise ValueError(f"exercise: no folder {exercise} with a spec.toml in {', '.join(map(str, roots()))}; "
                     f"exercises: {', '.join(known[:5])}{', ...' if len(known) > 5 else ''}")


def exercise_for(assignment: str, notebook: str) -> str:
    """The exercise a notebook of an nbgrader assignment is: '<assignment>/<notebook>' when that is one (an
    assignment is a chapter), else the drill called `notebook`, from any chapter (drill names are unique: the bank
    refuses two), so an instructor can hand out any set of drills as an assignment of its own."""
    exercise = f"{assignment}/{notebook}"
    if ID.fullmatch(exercise) and any((root / exercise / "spec.toml").is_file() for root in roots()):
        return exercise
    drills = [e for e in exercise_ids() if e.split("/")[1] == notebook and find(e).spec.drill is not None]
    if len(drills) == 1:
        return drills[0]
    raise ValueError(f"notebook: {assignment}/{notebook} is neither an exercise of chapter {assignment!r} nor a "
                     "drill of the bank")


def read_toml(path: Path) -> dict:
    """A TOML file's table; ValueError naming the file where it cannot be read."""
    try:
        return tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path}: not a readable TOML file: {error}") from None


def check_keys(label: str, table: dict, kinds: dict[str, type], required) -> None:
    """ValueError, starting with `label`, where `table` has a key not in `kinds`, lacks one of `required`, or
    holds a value not of its key's kind (a TOML boolean is no number)."""
    unknown = sorted(set(table) - set(kinds))
    missing = [key for key in required if key not in table]
    if unknown or missing:
        raise ValueError(f"{label}: " + "; ".join(([f"unknown keys {unknown}"] if unknown else [])
                                                  + ([f"missing keys {missing}"] if missing else []))
                         + f"; it may have {', '.join(kinds)}")
    for key, kind in kinds.items():
        if key in table and (not isinstance(table[key], kind) or isinstance(table[key], bool)):
            raise ValueError(f"{label}: {key} must be a {kind.__name__}, got {table[key]!r}")


@cache
def read_spec(path: Path) -> Spec:
    """Read and validate a spec.toml; an error names the file, the key and what was expected."""
    data = read_toml(path)
    check_keys(str(path), data, SPEC_KEYS, REQUIRED)
    for key in ("reference", "student_may_import", "clean_room"):
        bad = [m for m in data.get(key, ())
               if not (isinstance(m, str) and re.fullmatch(r"aisys(\.[a-z_][a-z0-9_]*)+", m))]
        if bad:
            raise ValueError(f"{path}: {key} must list aisys module names (as aisys.inference.model), got {bad}")
    both = sorted(set(data["reference"]) & set(data["student_may_import"]))
    if both:
        raise ValueError(f"{path}: {both} are both reference and student_may_import")
    outside = sorted(set(data.get("clean_room", ())) - set(data["student_may_import"]))
    if outside:
        raise ValueError(f"{path}: clean_room lists {outside}, which student_may_import does not")
    if data["gpus"] < 0:
        raise ValueError(f"{path}: gpus must be 0 or more, got {data['gpus']}")
    return Spec(title=data["title"], gpus=data["gpus"], reference=tuple(data["reference"]),
                student_may_import=tuple(data["student_may_import"]), page=data.get("page"),
                clean_room=tuple(data.get("clean_room", ())),
                drill=read_drill(path, data["drill"], path.parent.name) if "drill" in data else None)


def read_drill(path: Path, table: dict, name: str) -> Drill:
    """Validate a spec's [drill] table; an error names the file, the key and what was expected."""
    label = f"{path} [drill]"
    check_keys(label, table, DRILL_KEYS, DRILL_REQUIRED)
    for key, allowed in (("topic", TOPICS), ("difficulty", DIFFICULTIES), ("frequency", FREQUENCIES),
                         ("language", LANGUAGES)):
        if table[key] not in allowed:
            raise ValueError(f"{label}: {key} must be one of {', '.join(allowed)}; got {table[key]!r}")
    hints = table["hints"]
    if len(hints) < 2 or not all(isinstance(h, str) and h.strip() for h in hints):
        raise ValueError(f"{label}: hints must be a list of at least two non-empty strings, a ladder from a nudge "
                         f"to nearly the answer; got {hints!r}")
    return Drill(topic=table["topic"], difficulty=table["difficulty"], frequency=table["frequency"],
                 language=table["language"], problem=table.get("problem", name), hints=tuple(hints))


@dataclass(frozen=True)
class CheckNeeds:
    """What one check needs to run, read from its source: `require_gpu(gpus=..., optional=...)`."""

    check: str
    gpus: int  # 0: runs on a CPU
    optional: bool  # a speed check: skipped on a CPU and left out of the score there


def check_needs(checks: Path) -> list[CheckNeeds]:
    """Each `@check` function of a checks.py with the GPUs it asks for (the book's map and the spec's `gpus`)."""
    needs = []
    for node in ast.parse(checks.read_text()).body:
        decorated = isinstance(node, ast.FunctionDef) and any(
            getattr(getattr(d, "func", d), "id", None) == "check" for d in node.decorator_list)
        if not decorated:
            continue
        gpus, optional = 0, False
        for call in ast.walk(node):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "require_gpu":
                keywords = {k.arg: k.value.value for k in call.keywords if isinstance(k.value, ast.Constant)}
                gpus, optional = max(gpus, keywords.get("gpus", 1)), keywords.get("optional", False)
        needs.append(CheckNeeds(node.name, gpus, optional))
    return needs
