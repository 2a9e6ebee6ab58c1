"""`aisys-grader new <chapter>/<name>`: a new exercise's folder, from the templates beside this module.

The folder gets a notebook with a "You will learn" header, one solution cell and its check cell
(visible and hidden cases), a checks.py with that check, one known-wrong answer and a spec; the
book's table of contents gets the exercise's entry under its chapter. Nothing that exists is
overwritten.
"""

import re
from pathlib import Path

from .exercise import ID, check_id, course_root, exercise_ids, find

TEMPLATES = Path(__file__).parent / "templates"
FILES = ("notebook.py", "checks.py", "wrong_answers.toml", "spec.toml")


def new(exercise: str, title: str, *, root: Path | None = None, toc: Path | None = None) -> list[Path]:
    """Create `exercise`'s folder in `root` (default: the course) and list it in `toc` if given; the paths written."""
    check_id(exercise)
    if not title.strip() or '"' in title or "\n" in title:
        raise ValueError(f"title: expected one line without double quotes, got {title!r}")
    folder = (course_root() if root is None else Path(root)) / exercise
    if folder.exists():
        raise ValueError(f"exercise: {folder} exists already; nothing was written")
    chapter = exercise.split("/")[0]
    listed = None if toc is None else toc_with(Path(toc).read_text(), exercise, toc)  # refused before writing
    values = {"{exercise}": exercise, "{title}": title, "{page}": f"{chapter}/index"}
    folder.mkdir(parents=True)
    written = []
    for name in FILES:
        text = (TEMPLATES / name).read_text()
        for key, value in values.items():
            text = text.replace(key, value)
        (folder / name).write_text(text)
        written.append(folder / name)
    if toc is not None:
        Path(toc).write_text(listed)
        written.append(Path(toc))
    return written


def toc_with(text: str, exercise: str, toc: Path) -> str:
    """The table of contents `text` with `exercises/<exercise>` listed last among its chapter's sections."""
    chapter = exercise.split("/")[0]
    lines = text.splitlines()
    entry = f"file: exercises/{exercise}"
    if any(line.strip() == f"- {entry}" for line in lines):
        return text
    heads = [i for i, line in enumerate(lines) if line.strip() == f"- file: {chapter}/index"]
    if not heads:
        raise ValueError(f"{toc}: no chapter '{chapter}/index' to list {exercise} under; add the chapter first")
    head = heads[0]
    indent = len(lines[head]) - len(lines[head].lstrip())
    end = head + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    if not any(re.match(r"\s*sections:", line) for line in lines[head + 1:end]):
        lines.insert(end, " " * (indent + 2) + "sections:")
        end += 1
    lines.insert(end, " " * (indent + 4) + f"- {entry}")
    return "\n".join(lines) + "\n"


def drill_set(course: Path, assignment: str, drills: list[str]) -> list[Path]:
    """Copy the nbgrader source notebooks of `drills` into `course`/source/`assignment`/; the paths written. The
    assignment must be new, or hold only drills (a chapter's own assignment is not overwritten)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", assignment or "") or ID.fullmatch(f"{assignment}/x"):
        raise ValueError(f"assignment: expected a name of letters, digits, '-', '_' and '.', not a chapter's "
                         f"('NN-name'), got {assignment!r}")
    known = {e.split("/")[1]: e for e in exercise_ids() if find(e).spec.drill is not None}
    unknown = [drill for drill in drills if drill not in known]
    if unknown:
        raise ValueError(f"drills: {', '.join(map(repr, unknown))} not in the bank; its drills are listed by "
                         f"`aisys drill list --kind code` ({', '.join(sorted(known)[:4])}, ...)")
    exercises = [known[drill] for drill in drills]
    folder = Path(course) / "source" / assignment
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for drill, exercise in zip(drills, exercises):
        target = folder / f"{drill}.ipynb"
        target.write_bytes((course_root().parent / "autograder" / "source" / f"{exercise}.ipynb").read_bytes())
        written.append(target)
    return written
