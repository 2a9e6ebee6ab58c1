"""Keep the build honest: a page is re-run when anything it reads changes, not only its text or code.

myst-nb's cache (jupyter-cache) matches a page by the source of its code cells, so a prose-only edit rebuilds
without running anything. But pages also import aisys, read the stored measurements next to them and the
exercises' specs and checks, and run under the pinned packages, and Sphinx re-reads only the pages whose text changed:
when any of those inputs changes, this drops the whole cache and has Sphinx re-read every page, so every page
runs again."""

import hashlib
import shutil
from pathlib import Path

import aisys

# What pages read besides their own code cells: the aisys they import (wherever it is installed from), the
# checkout's exercise specs and checks (the home page's map says where each check runs) and pins, and the stored
# measurements and table of contents of the book being built.
REPO = Path(aisys.__file__).resolve().parents[2]
REPO_INPUTS = ["src/aisys/**/*.py", "solutions/*/*/spec.toml", "solutions/*/*/checks.py",
               "requirements/constraints.txt"]
BOOK_INPUTS = ["*/*.json", "*/*.txt", "_toc.yml"]


def inputs_digest(book: Path) -> str:
    digest = hashlib.sha256()
    for root, patterns in ((REPO, REPO_INPUTS), (Path(book), BOOK_INPUTS)):
        for path in sorted({p for pattern in patterns for p in root.glob(pattern) if p.is_file()}):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _drop_stale_cache(app, config):
    # myst-nb's own default place for the cache, next to the HTML
    cache = Path(config.nb_execution_cache_path or Path(app.outdir).parent / ".jupyter_cache")
    stamp = cache.with_name(cache.name + ".inputs")
    digest = inputs_digest(Path(app.srcdir))
    app.aisys_inputs_changed = not stamp.exists() or stamp.read_text() != digest
    if app.aisys_inputs_changed:
        shutil.rmtree(cache, ignore_errors=True)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)


def _reread_everything_if_inputs_changed(app, env, added, changed, removed):
    return sorted(env.found_docs) if app.aisys_inputs_changed else []


def setup(app):
    app.connect("config-inited", _drop_stale_cache)
    app.connect("env-get-outdated", _reread_everything_if_inputs_changed)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
