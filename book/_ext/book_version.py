"""Which version of the book a page belongs to, on every page: a line at the top naming it, with a link to the
published site's list of versions.

The publishing workflow (.github/workflows/book.yml) builds with AISYS_BOOK_VERSION set to the tag (or "latest" for
main) and deploys each version to a folder of its own, beside versions.html (book/publish.py writes it). A build
without the variable is a development build, and the offline bundle names its version and says it is a copy.
"""

import html
import os

VERSION_VARIABLE = "AISYS_BOOK_VERSION"
LINK_VARIABLE = "AISYS_BOOK_VERSIONS_LINK"  # "site": the version sits in a folder of the site; "none": no link


def banner(version: str | None, pagename: str, link: str = "site") -> str:
    """The HTML line for `pagename` (a path such as "01-architecture/roofline") of `version`."""
    if not version:
        return '<p class="aisys-version">Development build: not a published version of this book.</p>'
    text = f'<p class="aisys-version">Version <strong>{html.escape(version)}</strong>'
    if link == "site":  # the book is <site>/<version>/, so the list of versions is one folder above its root
        up = "../" * (pagename.count("/") + 1)
        text += f' · <a href="{up}versions.html">other versions</a>'
    return text + "</p>"


def _add_banner(app, pagename, templatename, context, doctree):
    if "body" in context:
        context["body"] = banner(os.environ.get(VERSION_VARIABLE), pagename,
                                 os.environ.get(LINK_VARIABLE, "site")) + context["body"]


def setup(app):
    app.connect("html-page-context", _add_banner)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
