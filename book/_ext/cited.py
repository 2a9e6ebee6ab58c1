"""The `{cited}` role: a number typed into prose on purpose, from a datasheet or a paper the page names.

Measured and computed numbers are glued from data (aisys.prose); `tests/test_book_prose.py` refuses any other
typed number with a unit or a ratio, so the author of a page decides, number by number, which it is."""

from docutils import nodes


def cited_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    return [nodes.inline(rawtext, text, classes=["cited"])], []


def setup(app):
    app.add_role("cited", cited_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
