"""Publishing: the workflow builds with README's commands, the site keeps every version, the bundle is whole."""

import json
import re
import shlex
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from notebooks import ROOT

sys.path.insert(0, str(ROOT / "book"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import book_version  # noqa: E402
import publish  # noqa: E402

WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def runs() -> list[str]:
    return [step["run"] for job in workflow()["jobs"].values() for step in job["steps"] if "run" in step]


def readme_commands() -> set[str]:
    """The `make` commands README's bash blocks give, each as its target (variables set on the line dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return {" ".join(w for w in shlex.split(line) if "=" not in w) for line in lines if line.startswith("make ")}


def test_the_workflow_runs_on_main_and_on_tags():
    triggers = workflow()[True]  # YAML 1.1 reads the key `on` as true
    assert triggers["push"]["branches"] == ["main"] and triggers["push"]["tags"] == ["v*"]


def test_the_workflow_builds_with_readme_s_commands_only():
    made = {" ".join(w for w in shlex.split(line.split("#")[0]) if "=" not in w)
            for run in runs() for line in run.splitlines() if line.strip().startswith("make ")}
    assert made == {"make bundle"}, "the workflow builds the book through README's make targets"
    assert made <= readme_commands(), "README gives the command the workflow builds with"
    assert not any("jupyter-book" in run for run in runs()), "no build step of its own that README does not give"
    tested = next(run for run in runs() if "pytest" in run)
    assert "AISYS_BUILT_BOOK=book/_build/html" in tested and "browser or bundle" in tested
    assert any("book/publish.py site" in run for run in runs())


def html_tree(folder: Path, title: str = "book") -> Path:
    (folder / "01-architecture").mkdir(parents=True)
    (folder / "index.html").write_text(f"<html>{title}</html>")
    (folder / "01-architecture" / "roofline.html").write_text("<html>roofline</html>")
    (folder / ".doctrees").mkdir()
    (folder / ".doctrees" / "environment.pickle").write_bytes(b"x")
    return folder


def test_the_site_keeps_every_version_and_replaces_only_the_one_published(tmp_path):
    site = tmp_path / "site"
    for version in ("v0.9", "latest", "v1.0"):
        assert publish.site(html_tree(tmp_path / version, version), version, site)
    publish.site(html_tree(tmp_path / "again", "latest again"), "latest", site)
    assert [v["version"] for v in json.loads((site / "versions.json").read_text())] == ["latest", "v1.0", "v0.9"]
    assert (site / "latest" / "index.html").read_text() == "<html>latest again</html>"
    assert (site / "v0.9" / "index.html").read_text() == "<html>v0.9</html>"
    assert 'url=latest/index.html' in (site / "index.html").read_text()
    assert 'href="v1.0/index.html"' in (site / "versions.html").read_text()
    assert (site / ".nojekyll").exists() and not (site / "latest" / ".doctrees").exists()


def test_the_bundle_holds_the_book_the_notebooks_and_how_to_open_them(tmp_path):
    notebooks = tmp_path / "exercises"
    (notebooks / "01-architecture").mkdir(parents=True)
    (notebooks / "01-architecture" / "roofline.ipynb").write_text("{}")
    out = publish.bundle(html_tree(tmp_path / "html"), "v1.2", tmp_path / "dist" / "b.zip", notebooks)
    names = set(zipfile.ZipFile(out).namelist())
    assert names == {"aisys-book-v1.2/README.txt", "aisys-book-v1.2/versions.html", "aisys-book-v1.2/book/index.html",
                     "aisys-book-v1.2/book/01-architecture/roofline.html",
                     "aisys-book-v1.2/notebooks/01-architecture/roofline.ipynb"}
    assert "book/index.html" in zipfile.ZipFile(out).read("aisys-book-v1.2/README.txt").decode()


@pytest.mark.parametrize("call, named", [
    (lambda tmp: publish.site(html_tree(tmp / "h"), "1.0", tmp / "s"), "version"),
    (lambda tmp: publish.site(html_tree(tmp / "h"), "../etc", tmp / "s"), "version"),
    (lambda tmp: publish.bundle(tmp / "nothing", "v1.0", tmp / "b.zip"), "html"),
])
def test_a_bad_version_or_folder_is_refused_by_name(tmp_path, call, named):
    with pytest.raises(ValueError, match=rf"^{named} must be"):
        call(tmp_path)


def test_every_page_names_its_version_and_links_the_list_one_folder_above_the_book():
    assert "../../versions.html" in book_version.banner("v1.0", "01-architecture/roofline")
    assert 'href="../versions.html"' in book_version.banner("latest", "intro")
    assert "href" not in book_version.banner("v1.0", "intro", link="none")
    assert "Development build" in book_version.banner(None, "intro")
    assert "&lt;b&gt;" in book_version.banner("<b>", "intro"), "the version is escaped"
