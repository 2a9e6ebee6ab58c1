"""The `{book-map}` directive: the home page's map of the book, generated from the table of contents and the
exercises' specs, so that it never disagrees with them.

Its content gives one line per chapter, `<chapter folder>: what it teaches`; the directive adds each chapter's
title, link and pages (from _toc.yml and the chapter's index), marks a chapter that is not written yet, and lists
its graded exercises with where their checks run (from each exercise's checks.py and spec.toml)."""

from pathlib import Path

import yaml
from aisys_grader.exercise import check_needs, find
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

NOT_WRITTEN = "This chapter is not written yet."
BANK_PAGE = "09-drills/bank"  # the table of every interview drill, whichever chapter it belongs to


def chapters(book: Path) -> list[dict]:
    """The chapters of the table of contents, in order: folder, title, pages, exercises, written or not."""
    toc = yaml.safe_load((book / "_toc.yml").read_text())
    found = []
    for part in toc["parts"]:
        for chapter in part["chapters"]:
            folder, name = chapter["file"].split("/", 1) if "/" in chapter["file"] else (None, None)
            if name != "index":
                continue
            index = (book / f"{chapter['file']}.md").read_text()
            sections = [s["file"] for s in chapter.get("sections", [])]
            found.append({
                "folder": folder,
                "file": chapter["file"],
                "title": next(line[2:] for line in index.splitlines() if line.startswith("# ")),
                "written": NOT_WRITTEN not in index,
                "pages": [s for s in sections if not s.startswith("exercises/")],
                "exercises": [s.removeprefix("exercises/") for s in sections if s.startswith("exercises/")],
            })
    return found


# Where an exercise's checks run, from the least to the most a student needs.
CATEGORIES = ["CPU", "CPU; speed graded on a GPU", "CPU; some checks on GPUs", "GPU"]


def where_it_runs(exercise: str) -> tuple[str, str]:
    """(one of CATEGORIES, the map's words for it) for an exercise, from what its checks ask for."""
    needs = check_needs(find(exercise).checks)
    on_gpu = [need for need in needs if need.gpus]
    required = [need for need in on_gpu if not need.optional]
    if len(on_gpu) == len(needs):
        return "GPU", "GPU"
    if not required:
        return ("CPU", "CPU") if not on_gpu else ("CPU; speed graded on a GPU",) * 2
    gpus = max(need.gpus for need in required)
    return "CPU; some checks on GPUs", f"CPU; {len(required)} of {len(needs)} checks on {gpus} GPU{'s' * (gpus > 1)}"


def _plain(title: str) -> str:
    """A title fit for a link's text: no inline code marks, no angle brackets."""
    return title.replace("`", "").replace("<", "").replace(">", "")


class BookMap(SphinxDirective):
    has_content = True

    def run(self):
        book = Path(self.env.srcdir)
        teaches = dict(line.split(":", 1) for line in self.content if line.strip())
        listed = chapters(book)
        missing = sorted({c["folder"] for c in listed} ^ set(teaches))
        if missing:
            raise ExtensionError(f"book-map: give one '<folder>: what it teaches' line per chapter of _toc.yml; "
                                 f"these differ: {missing}")
        rows = [":::{list-table}", ":header-rows: 1", ":widths: 25 35 40", "",
                "* - Chapter", "  - What it teaches", "  - Graded exercises (★) and where their checks run"]
        for chapter in listed:
            count = len(chapter["pages"])
            pages = f"{count} page{'s' * (count != 1)}" if chapter["written"] else "*not written yet*"
            drills = [e for e in chapter["exercises"] if find(e).spec.drill is not None]
            exercises = [f"    - ★ {{doc}}`{_plain(find(e).spec.title)} <exercises/{e}>` ({where_it_runs(e)[1]})"
                         for e in chapter["exercises"] if e not in drills]
            if drills:  # too many to list one by one: the bank's page lists every drill (drill_bank.py)
                runs = sorted({where_it_runs(e)[1] for e in drills}, key=lambda w: w != "CPU")
                exercises.append(f"    - ★ {len(drills)} timed coding drills ({', '.join(runs)}), listed in "
                                 f"{{doc}}`{BANK_PAGE}`")
            exercises = exercises or ["    - none yet"]
            rows += [f"* - {{doc}}`{chapter['file']}` ({pages})", f"  - {teaches[chapter['folder']].strip()}",
                     "  - " + exercises[0].lstrip(), *exercises[1:]]
        rows.append(":::")
        container = nodes.container(classes=["book-map"])
        self.state.nested_parse(StringList(rows, source=self.get_source_info()[0]), self.content_offset, container)
        for chapter in listed:  # a chapter's index, specs or checks changing changes the map
            self.env.note_dependency(str(book / f"{chapter['file']}.md"))
            for exercise in chapter["exercises"]:
                self.env.note_dependency(str(find(exercise).folder / "spec.toml"))
                self.env.note_dependency(str(find(exercise).checks))
        self.env.note_dependency(str(book / "_toc.yml"))
        return [container]


def setup(app):
    app.add_directive("book-map", BookMap)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
