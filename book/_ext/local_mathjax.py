"""Serve MathJax from the built book (installed by `npm ci` into book/node_modules), never from a CDN."""

import shutil
from pathlib import Path

from sphinx.errors import ExtensionError

MATHJAX = Path(__file__).resolve().parents[1] / "node_modules" / "mathjax" / "es5"
# tex-chtml.js plus what it loads on demand: TeX extensions, fonts, the menu and accessibility.
PARTS = ["tex-chtml.js", "input", "output", "ui", "a11y", "sre"]


def _check_installed(app):
    if not (MATHJAX / "tex-chtml.js").exists():
        raise ExtensionError(f"MathJax is missing from {MATHJAX}: run `npm ci` in book/ (`make book` does)")


def _copy(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    for part in PARTS:
        source = MATHJAX / part
        if source.is_dir():
            shutil.copytree(source, target / part, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / part)


def setup(app):
    app.config.mathjax_path = "mathjax/tex-chtml.js"  # relative paths resolve under _static/
    app.connect("builder-inited", _check_installed)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
