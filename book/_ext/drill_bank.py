"""The `{drill-bank}` directive: chapter 9's tables of coding drills and concept cards, generated from the bank
(aisys.drill.bank), so that the page lists every item there is and nothing else.

`:kind: code` gives one row per coding drill, linked to its notebook; `:kind: card` one row per concept card."""

from aisys.drill import bank
from aisys.drill.card import all_cards
from aisys_grader.exercise import find
from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective


class DrillBank(SphinxDirective):
    option_spec = {"kind": lambda value: directives.choice(value, ("code", "card"))}

    def run(self):
        kind = self.options.get("kind", "code")
        items = sorted(bank.select(kind=kind), key=lambda i: (i.topic, i.difficulty, i.id))
        if kind == "code":
            rows = [":::{list-table}", ":header-rows: 1", ":widths: 34 18 14 12 10 12", "",
                    "* - Drill", "  - Topic", "  - Difficulty (budget)", "  - Asked", "  - Language", "  - Hints"]
            for item in items:
                hints = len(find(item.exercise).spec.drill.hints)
                rows += [f"* - {{doc}}`{item.title} <../exercises/{item.exercise}>`", f"  - {item.topic}",
                         f"  - {item.difficulty} ({item.budget_minutes} min)", f"  - {item.frequency}",
                         f"  - {item.language}", f"  - {hints}"]
                self.env.note_dependency(str(find(item.exercise).folder / "spec.toml"))
        else:
            rows = [":::{list-table}", ":header-rows: 1", ":widths: 30 16 14 10 12 18", "",
                    "* - Card", "  - Topic", "  - Difficulty (budget)", "  - Asked", "  - Answer", "  - Taught in"]
            for item in items:
                answer = type(all_cards()[item.id].ask.answer).__name__.lower()
                rows += [f"* - `{item.id}`", f"  - {item.topic}", f"  - {item.difficulty} ({item.budget_minutes} min)",
                         f"  - {item.frequency}", f"  - {answer}", f"  - {{doc}}`/{item.page}`"]
        rows.append(":::")
        container = nodes.container(classes=["drill-bank"])
        self.state.nested_parse(StringList(rows, source=self.get_source_info()[0]), self.content_offset, container)
        return [container]


def setup(app):
    app.add_directive("drill-bank", DrillBank)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
