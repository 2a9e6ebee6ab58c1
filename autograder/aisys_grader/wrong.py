"""Known-wrong answers: typical mistakes, each declared as edits of an exercise's solution (wrong_answers.toml).

    [[answer]]
    name = "size_of_one_layer"                   # [a-z0-9_]+, unique in the file
    mistake = "Forgets that every layer has its own keys and values: the size of one layer's cache."
    fails = ["kv_cache_bytes", "max_sequences"]  # exactly the checks that must reject it

    [[answer.edit]]                              # one or more, applied in order
    old = '''
        per_token = 2 * config["n_layers"] * config["n_kv_heads"] * head_size * BYTES[dtype]
        return per_token * tokens * batch
    '''                                          # must occur exactly once in the program it edits
    new = '''
        return 2 * config["n_kv_heads"] * head_size * BYTES[dtype] * tokens * batch
    '''

An edit inside one line says just that line, or part of it: `old = 'partner = i ^ j'`, `new = 'partner = i + j'`.
The edits apply to the solution as a student writes it: notebook.py without its `### BEGIN SOLUTION` and
`### END SOLUTION` lines (`solution_program`), and the edited notebook runs as a student's would, each cell
in its place. Only where an edit cannot say the mistake (a wrapper around the solution's own function, a
helper of the answer's own) does an answer hold `code` instead of edits: Python run after the solution's cells.
"""

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from .checks import checks_for
from .exercise import check_keys, find, read_toml

NAME = re.compile(r"[a-z0-9_]+")
MARKER = re.compile(r"### (BEGIN|END) SOLUTION")  # as nbgrader finds them, in a comment of any language
ANSWER_KEYS = {"name": str, "mistake": str, "fails": list, "edit": list, "code": str}
EDIT_KEYS = {"old": str, "new": str}


@dataclass(frozen=True)
class Edit:
    old: str  # a snippet of the program so far: it must occur there exactly once
    new: str  # what replaces it


@dataclass(frozen=True)
class Answer:
    name: str
    mistake: str  # what the answer gets wrong, as a sentence
    fails: tuple[str, ...]  # exactly the checks that must reject it
    edits: tuple[Edit, ...] = ()
    code: str = ""  # where no edit can say it: Python run after the solution's cells


def read(path: Path, checks=None) -> list[Answer]:
    """The answers of a wrong_answers.toml, validated; `checks`, where given, are the names `fails` may list.
    An error names the file, the answer and the key."""
    data = read_toml(path)
    if set(data) != {"answer"} or not isinstance(data["answer"], list):
        raise ValueError(f"{path}: expected [[answer]] tables only, got keys {sorted(data)}")
    answers = [_answer(path, i, entry, checks) for i, entry in enumerate(data["answer"])]
    names = [a.name for a in answers]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"{path}: answer names must be unique; more than one is named {twice}")
    return answers


def _answer(path: Path, index: int, entry, checks) -> Answer:
    label = f"{path}: answer {entry.get('name', index + 1)!r}" if isinstance(entry, dict) else f"{path}: answer {index}"
    if not isinstance(entry, dict):
        raise TypeError(f"{label}: expected a table, got {entry!r}")
    check_keys(label, entry, ANSWER_KEYS, ("name", "mistake", "fails"))
    if not NAME.fullmatch(entry["name"]):
        raise ValueError(f"{label}: name must be lower-case letters, digits and _, got {entry['name']!r}")
    if not entry["mistake"].strip():
        raise ValueError(f"{label}: mistake must say what the answer gets wrong")
    fails = entry["fails"]
    if not fails or not all(isinstance(f, str) for f in fails) or len(set(fails)) < len(fails):
        raise ValueError(f"{label}: fails must list the checks that reject the answer, each once, got {fails!r}")
    if checks is not None and (unknown := sorted(set(fails) - set(checks))):
        raise ValueError(f"{label}: fails names {unknown}, which are not checks of the exercise; "
                         f"its checks are {', '.join(checks)}")
    if ("edit" in entry) == ("code" in entry):
        raise ValueError(f"{label}: give either edits ([[answer.edit]] with old and new) or code, not "
                         + ("both" if "edit" in entry else "neither"))
    edits = []
    for i, edit in enumerate(entry.get("edit", ())):
        where = f"{label}, edit {i + 1}"
        if not isinstance(edit, dict):
            raise TypeError(f"{where}: expected a table with old and new, got {edit!r}")
        check_keys(where, edit, EDIT_KEYS, tuple(EDIT_KEYS))
        if not edit["old"] or edit["old"] == edit["new"]:
            raise ValueError(f"{where}: old must be a snippet of the solution that new changes")
        edits.append(Edit(edit["old"], edit["new"]))
    if "edit" in entry and not edits or "code" in entry and not entry["code"].strip():
        raise ValueError(f"{label}: {'edit' if 'edit' in entry else 'code'} is empty")
    return Answer(entry["name"], entry["mistake"].strip(), tuple(fails), tuple(edits), entry.get("code", ""))


def answers(exercise: str) -> list[Answer]:
    """The known-wrong answers of an exercise, their checks validated against its registered ones."""
    return read(find(exercise).wrong_answers, checks_for(exercise))


def solution_program(exercise: str) -> str:
    """The solution as the student writes it: notebook.py (jupytext) without its solution markers."""
    text = find(exercise).notebook.read_text()
    return "".join(line for line in text.splitlines(keepends=True) if not MARKER.search(line))


def occurrences(text: str, snippet: str) -> int:
    count, at = 0, text.find(snippet)
    while at >= 0:
        count, at = count + 1, text.find(snippet, at + 1)
    return count


def apply(program: str, answer: Answer, where: str = "the solution") -> str:
    """`program` with the answer's edits made in order; an edit whose old text does not occur exactly once
    is an error naming the answer and quoting the text."""
    for i, edit in enumerate(answer.edits):
        count = occurrences(program, edit.old)
        if count != 1:
            raise ValueError(f"answer {answer.name!r}, edit {i + 1}: old occurs {count} times in {where}, "
                             f"not once:\n{textwrap.indent(edit.old, '    | ', lambda line: True)}")
        program = program.replace(edit.old, edit.new)
    return program


def wrong_program(exercise: str, answer: Answer) -> str:
    """The notebook (jupytext text) a student making this mistake writes: the solution with the answer's edits."""
    return apply(solution_program(exercise), answer, f"the solution of {exercise} ({find(exercise).wrong_answers})")
