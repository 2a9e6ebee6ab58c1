"""Publishing the built book: the offline bundle, and the site that holds every published version.

    python book/publish.py bundle --html book/_build/html --version v1.0 --out dist/aisys-book-v1.0.zip
    python book/publish.py site --html book/_build/html --version latest --site site/

`bundle` zips the built HTML and the student notebooks (exercises/) under one folder, with a README saying how to
open them without a network. `site` copies the HTML into <site>/<version>/ (replacing that version only), and
rewrites the site's versions.json, versions.html (the list every page's version line links to) and index.html
(which sends a reader to "latest"). Standard library only: the publishing workflow runs it as it is.
"""

import argparse
import json
import re
import shutil
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION = re.compile(r"latest|v\d+(\.\d+)*([a-z0-9.-]*)")  # main publishes "latest"; a tag its own name

BUNDLE_README = """aisys {version}: the book and its exercise notebooks, for reading offline
=================================================================

book/       the book as the published site shows it. Open book/index.html in a browser:
            every page, figure, search and formula works without a network (MathJax is
            in the bundle). If your browser blocks pages opened from files, serve the
            folder instead:  python3 -m http.server --directory book 8000
            and open http://localhost:8000/
notebooks/  the exercise notebooks, one folder per chapter, as students receive them.
            They run in JupyterLab with the aisys package installed: from a clone of the
            repository at this version, `make book` installs it into .venv (see its README),
            then `jupyter lab notebooks/`.

This copy is version {version}. The published site lists every version.
"""


def check_version(version: str) -> str:
    if not isinstance(version, str) or not VERSION.fullmatch(version):
        raise ValueError(f"version must be 'latest' or a tag such as 'v1.0', got {version!r}")
    return version


def check_html(html: Path) -> Path:
    html = Path(html)
    if not (html / "index.html").is_file():
        raise ValueError(f"html must be a built book (a folder holding index.html), got {str(html)!r}")
    return html


def bundle(html: Path, version: str, out: Path, notebooks: Path = ROOT / "exercises") -> Path:
    """Zip the built book and the student notebooks into `out`, under one folder named for the version."""
    html, version, out = check_html(html), check_version(version), Path(out)
    top = f"aisys-book-{version}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{top}/README.txt", BUNDLE_README.format(version=version))
        archive.writestr(f"{top}/versions.html", (  # where every page's version line points, as on the site
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>aisys: versions</title></head>\n"
            f"<body><h1>Version {version}, an offline copy</h1>\n<p>The published site this bundle came from lists "
            "every version of the book; this copy holds <a href=\"book/index.html\">this one</a>.</p></body></html>\n"))
        for path in sorted(p for p in html.rglob("*") if p.is_file() and ".doctrees" not in p.parts):
            archive.write(path, f"{top}/book/{path.relative_to(html).as_posix()}")
        for path in sorted(Path(notebooks).glob("*/*.ipynb")):
            archive.write(path, f"{top}/notebooks/{path.relative_to(notebooks).as_posix()}")
    return out


def _version_key(version: str):
    """latest first, then tags newest first (by their numbers)."""
    return (0, ()) if version == "latest" else (1, tuple(-int(n) for n in re.findall(r"\d+", version)))


def site(html: Path, version: str, folder: Path) -> list[str]:
    """Put the built book at <folder>/<version>/ and rewrite the site's list of versions; returns that list."""
    html, version, folder = check_html(html), check_version(version), Path(folder)
    target = folder / version
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(html, target, ignore=shutil.ignore_patterns(".doctrees", ".buildinfo"))
    versions = sorted((p.name for p in folder.iterdir() if p.is_dir() and VERSION.fullmatch(p.name)
                       and (p / "index.html").is_file()), key=_version_key)
    (folder / "versions.json").write_text(json.dumps(
        [{"version": v, "url": f"{v}/index.html"} for v in versions], indent=1) + "\n")
    items = "\n".join(f'<li><a href="{v}/index.html">{v}</a></li>' for v in versions)
    (folder / "versions.html").write_text(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>aisys: versions</title></head>\n"
        "<body><h1>Versions of the book</h1>\n<p>latest follows the main branch; each tag is a release.</p>\n"
        f"<ul>\n{items}\n</ul></body></html>\n")
    start = "latest" if "latest" in versions else versions[0]
    (folder / "index.html").write_text(
        f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"refresh\" content=\"0; url={start}/index.html\"><title>aisys</title></head>\n"
        f"<body><a href=\"{start}/index.html\">The book</a></body></html>\n")
    (folder / ".nojekyll").write_text("")  # Pages would otherwise hide Sphinx's _static/ and _images/
    return versions


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("bundle", "site"):
        command = commands.add_parser(name)
        command.add_argument("--html", type=Path, required=True, help="the built book (book/_build/html)")
        command.add_argument("--version", required=True, help="'latest' or a tag such as v1.0")
    commands.choices["bundle"].add_argument("--out", type=Path, required=True, help="the zip to write")
    commands.choices["site"].add_argument("--site", type=Path, required=True, help="the site's folder")
    args = parser.parse_args(argv)
    if args.command == "bundle":
        print(f"wrote {bundle(args.html, args.version, args.out)}")
    else:
        print("the site holds " + ", ".join(site(args.html, args.version, args.site)))


if __name__ == "__main__":
    main()
