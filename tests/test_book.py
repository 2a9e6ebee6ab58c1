"""The book builds offline with warnings as errors, serves its own MathJax and links every exercise."""

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from notebooks import EXERCISES, ROOT

JUPYTER_BOOK = [str(Path(sys.executable).parent / "jupyter-book"), "build", "--warningiserror", "--nitpick",
                "--keep-going"]
EXTERNAL = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""", re.I)


def build(book: Path, output: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*JUPYTER_BOOK, str(book), "--path-output", str(output)],
                          capture_output=True, text=True, timeout=1800)  # about 10 minutes on 2 idle cores


CAUSE = re.compile(r"WARNING|ERROR|Error|Exception|Traceback|didn't respond|failed", re.I)


def must_build(done: subprocess.CompletedProcess) -> None:
    """Fail with the lines that say why the build broke last, where a log's tail (all CI shows) still holds them."""
    if done.returncode != 0:
        log = (done.stdout + done.stderr).splitlines()
        causes = [line for line in log if CAUSE.search(line)][:40]
        pytest.fail("the book does not build cleanly; the log's end, then its lines that name a cause:\n"
                    + "\n".join(log[-60:]) + "\n--- causes ---\n" + "\n".join(causes), pytrace=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> subprocess.CompletedProcess:
    """The book built into a folder of the tests' own; or, where AISYS_BUILT_BOOK names one, that build (the
    publishing workflow tests the book it has just built and will deploy)."""
    if os.environ.get("AISYS_BUILT_BOOK"):
        done = subprocess.CompletedProcess([], 0, stdout="", stderr="")
        done.html = Path(os.environ["AISYS_BUILT_BOOK"]).resolve()
        return done
    output = tmp_path_factory.mktemp("book")
    done = build(ROOT / "book", output)
    must_build(done)
    done.html = output / "_build" / "html"
    return done


@pytest.fixture(scope="module")
def html(built) -> Path:
    return built.html


@pytest.mark.slow
def test_the_build_log_holds_no_noise(built):
    assert "Kernel is running over TCP" not in built.stdout + built.stderr


@pytest.mark.slow
def test_no_page_loads_anything_from_the_internet(html):
    offenders = {str(p.relative_to(html)): EXTERNAL.findall(p.read_text()) for p in html.rglob("*.html")}
    assert not {page: tags for page, tags in offenders.items() if tags}
    for css in html.rglob("*.css"):
        assert not re.search(r"@import\s+url\(\s*['\"]?(https?:)?//", css.read_text(errors="ignore")), css


@pytest.mark.slow
def test_mathjax_is_served_from_the_book(html):
    page = (html / "01-architecture" / "roofline.html").read_text()
    assert re.search(r'<script[^>]+src="\.\./_static/mathjax/tex-chtml\.js', page)
    assert (html / "_static" / "mathjax" / "tex-chtml.js").stat().st_size > 500_000
    assert list((html / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))


@pytest.mark.slow
def test_pages_execute_and_show_generated_figures(html):
    page = (html / "01-architecture" / "roofline.html").read_text()
    assert re.search(r'<img[^>]+src="[^"]+\.png"', page), "the roofline page has no figure generated at build time"


@pytest.mark.slow
@pytest.mark.parametrize("exercise", EXERCISES)
def test_every_exercise_is_a_page_with_a_download(html, exercise):
    page = html / "exercises" / f"{exercise}.html"
    assert page.exists(), f"{exercise} is not in the book's table of contents"
    assert re.search(rf'href="[^"]*{re.escape(Path(exercise).name)}\.ipynb"', page.read_text())


@pytest.mark.slow
def test_unwritten_chapters_say_so_in_the_contents_and_on_the_map(html):
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    titles = {c["file"]: c.get("title", "") for part in toc["parts"] for c in part["chapters"]}
    home = (html / "intro.html").read_text()
    home = home[home.index('class="book-map'):]  # the map, not the sidebar's contents
    for chapter in sorted((ROOT / "book").glob("0[1-9]-*/index.md")):
        lines = [line for line in chapter.read_text().splitlines() if line.strip()]
        unwritten = lines[1:] == ["This chapter is not written yet."]
        assert unwritten or len(lines) > 3, f"{chapter} is neither written nor marked as not written"
        entry = f"{chapter.parent.name}/index"
        assert titles[entry].endswith("(not written yet)") is unwritten, f"_toc.yml's title for {entry}"
        row = home[home.index(f'href="{entry}.html"'):][:3000].split("</tr>")[0]
        assert ("not written yet" in row) is unwritten, f"the home page's map row of {entry}"


@pytest.mark.slow
def test_the_home_page_maps_every_exercise_and_where_it_runs(html):
    home = (html / "intro.html").read_text()
    for exercise in EXERCISES:
        assert f'href="exercises/{exercise}.html"' in home, f"the map does not link {exercise}"
    assert "★" in home and "(GPU)" in home and "(CPU; speed graded on a GPU)" in home
    assert re.search(r'<img[^>]+src="[^"]+\.png"', home), "the map's figure was not generated"


@pytest.mark.slow
def test_glued_and_cited_numbers_reach_the_reader(html):
    page = (html / "07-inference" / "flash-attention.html").read_text()
    assert 'class="pasted-text">takes ' in page, "a comparison glued by prose.time_against is missing"
    assert 'class="cited">' in page
    unrendered = [str(p.relative_to(html)) for p in html.glob("0*/*.html")
                  if re.search(r"\{(glue:\w+|cited)\}`", p.read_text())]
    assert not unrendered, f"roles left as typed: {unrendered}"


@pytest.mark.slow
def test_no_maths_is_left_as_dollar_signs(html):
    """A code cell's Markdown output is not parsed for maths: its `$S$` would reach the reader as it is."""
    left = {}
    for page in html.glob("0*/*.html"):
        text = re.sub(r"<(pre|script)\b.*?</\1>|<div class=\"highlight.*?</div>", "", page.read_text(), flags=re.S)
        if found := re.findall(r"\$[^$<>\s][^$<>]{0,40}\$", text):
            left[str(page.relative_to(html))] = found
    assert not left, f"maths shown as typed, not typeset: {left}"


@pytest.mark.slow
def test_one_search_field_a_favicon_and_wrapped_code(html):
    page = (html / "03-tensor-cores" / "tensor-cores.html").read_text()
    assert page.count('class="btn search-button-field') == 1, "the header repeats the sidebar's search field"
    assert re.search(r'<link rel="icon" href="[^"]*favicon\.ico"', page) and (html / "_static" / "favicon.ico").exists()
    assert "custom.css" in page and "pre-wrap" in (html / "_static" / "custom.css").read_text()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
# CI sets this, so that a missing browser fails the run instead of skipping the test.
BROWSER_REQUIRED = os.environ.get("AISYS_REQUIRE_BROWSER") == "1"


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None and not BROWSER_REQUIRED, reason="needs chromium (apt-get install chromium)")
def test_math_renders_in_a_browser_that_can_reach_no_other_host(html):
    assert CHROMIUM, "AISYS_REQUIRE_BROWSER=1 but chromium is not installed"
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/01-architecture/roofline.html"
        dom = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--no-first-run", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={html.parent / 'chromium'}", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
             "--virtual-time-budget=20000", "--dump-dom", url],
            capture_output=True, text=True, timeout=120).stdout
    finally:
        server.shutdown()
    source = (html / "01-architecture" / "roofline.html").read_text()
    formulas = len(re.findall(r'class="math', source))
    assert formulas > 0
    assert dom.count("<mjx-container") >= formulas, "MathJax did not typeset the page's formulas offline"
    assert "<mjx-merror" not in dom, "MathJax reported a TeX error"


def offline_dom(url: str, profile: Path) -> str:
    """The DOM Chromium renders at `url` (a file:// one) when it may reach no host at all."""
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", "--disable-component-update", "--disable-sync", "--allow-file-access-from-files",
         f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=20000",
         "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None and not BROWSER_REQUIRED, reason="needs chromium (apt-get install chromium)")
def test_the_offline_bundle_opens_from_its_files_in_a_browser_that_can_reach_no_host(html, tmp_path):
    """`make bundle`'s zip (or the one AISYS_BUNDLE names), unzipped and opened as files, as its README says."""
    import zipfile

    sys.path.insert(0, str(ROOT / "book"))
    import publish

    zipped = Path(os.environ.get("AISYS_BUNDLE") or publish.bundle(html, "v0.0-test", tmp_path / "bundle.zip"))
    with zipfile.ZipFile(zipped) as archive:
        archive.extractall(tmp_path / "unzipped")
    (top,) = (tmp_path / "unzipped").iterdir()
    assert (top / "README.txt").read_text().count("book/index.html") >= 1
    assert {p.relative_to(top / "notebooks").as_posix() for p in (top / "notebooks").glob("*/*.ipynb")} == {
        f"{e}.ipynb" for e in EXERCISES}, "the bundle holds every student notebook"
    page = top / "book" / "01-architecture" / "roofline.html"
    dom = offline_dom(page.as_uri(), tmp_path / "chromium")
    formulas = len(re.findall(r'class="math', page.read_text()))
    assert formulas > 0 and dom.count("<mjx-container") >= formulas, "MathJax did not typeset the bundle's page"
    assert "aisys-version" in dom, "the page names the version it belongs to"
    assert 'href="../../versions.html"' in page.read_text() or "Development build" in page.read_text()
    assert (top / "versions.html").is_file(), "the version line's link leads somewhere in the bundle too"


BREAKAGES = {
    "broken reference": ("\nSee {doc}`no-such-page`.\n", "no-such-page"),
    "failing page": ("\n```{code-cell} ipython3\nraise RuntimeError('page fails')\n```\n", "page fails"),
}


@pytest.mark.slow
@pytest.mark.parametrize("breakage", BREAKAGES)
def test_a_broken_book_fails_the_build(tmp_path, breakage):
    """With the book's own settings and extensions (a one-page book: building all the others proves nothing
    here), a reference to no page and a page whose code raises each fail the build, naming the cause."""
    addition, evidence = BREAKAGES[breakage]
    must_build(build(tiny_book(tmp_path / "whole", TINY_PAGE), tmp_path / "whole" / "out"))  # the page alone builds
    done = build(tiny_book(tmp_path / "broken", TINY_PAGE + addition), tmp_path / "broken" / "out")
    assert done.returncode != 0
    assert evidence in done.stdout + done.stderr


TINY_PAGE = """---
jupytext: {text_representation: {extension: .md, format_name: myst}}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
# A page

```{code-cell} ipython3
import json, time
print(json.load(open("data/measured.json")), "run at", time.time())
```
"""


def tiny_book(root: Path, page: str, **config) -> Path:
    """A one-page book with the real book's extensions and settings, `config` added to its Sphinx settings."""
    book = root / "book"
    (book / "data").mkdir(parents=True)
    for folder in ("_ext", "_static"):
        shutil.copytree(ROOT / "book" / folder, book / folder)
    settings = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())
    del settings["sphinx"]["local_extensions"]["book_map"]  # the tiny book has no chapters to map
    settings["sphinx"]["config"].update(config)
    (book / "_config.yml").write_text(yaml.safe_dump(settings))
    (book / "_toc.yml").write_text("format: jb-book\nroot: intro\n")
    (book / "node_modules").symlink_to(ROOT / "book" / "node_modules")
    (book / "intro.md").write_text(page)
    (book / "data" / "measured.json").write_text("1.0")
    return book


@pytest.mark.slow
def test_a_prose_edit_runs_nothing_and_a_changed_measurement_runs_its_pages(tmp_path):
    book = tiny_book(tmp_path, TINY_PAGE)

    def executed() -> bool:
        done = build(book, tmp_path / "out")
        must_build(done)
        return "Executed notebook" in done.stdout + done.stderr

    assert executed()
    (book / "intro.md").write_text(TINY_PAGE + "\nA sentence more.\n")
    assert not executed(), "a prose-only edit ran the page again"
    (book / "data" / "measured.json").write_text("2.0")
    assert executed(), "the stored measurement changed but the page was not run again"
    assert "2.0 run at" in (tmp_path / "out" / "_build" / "html" / "intro.html").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("startup_timeout, builds", [(2, False), (20, True)])
def test_a_kernel_slow_to_start_gets_the_configured_time(tmp_path, monkeypatch, startup_timeout, builds):
    # nbclient's own limit is 60 s, and a kernel starved by a loaded machine once ended CI's build with it
    slow = tmp_path / "jupyter" / "kernels" / "slow"
    slow.mkdir(parents=True)
    start = "import time; time.sleep(6); from ipykernel import kernelapp; kernelapp.launch_new_instance()"
    argv = [sys.executable, "-c", start, "-f", "{connection_file}"]
    (slow / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "slow", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    page = TINY_PAGE.replace("name: python3", "name: slow")
    done = build(tiny_book(tmp_path, page, kernel_startup_timeout=startup_timeout), tmp_path / "out")
    if builds:
        must_build(done)
    else:
        assert done.returncode != 0
        assert f"didn't respond in {startup_timeout} seconds" in done.stdout + done.stderr
