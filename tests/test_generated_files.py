"""Generated notebooks are never edited by hand: regenerating them from solutions/ changes nothing."""

from aisys_grader.generate import generate
from notebooks import ROOT


def test_generated_notebooks_are_in_sync(tmp_path):
    fresh = generate(out=tmp_path)
    assert fresh, "no exercises found in solutions/"
    stale = [str(p.relative_to(tmp_path)) for p in fresh
             if not (ROOT / p.relative_to(tmp_path)).exists()
             or (ROOT / p.relative_to(tmp_path)).read_bytes() != p.read_bytes()]
    assert not stale, f"stale or missing generated files (run `make exercises`): {stale}"


def test_no_generated_notebook_without_a_source(tmp_path):
    fresh = {p.relative_to(tmp_path) for p in generate(out=tmp_path)}
    committed = {p.relative_to(ROOT) for folder in ("exercises", "autograder/source")
                 for p in (ROOT / folder).rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts}
    assert committed == fresh, f"generated notebooks whose source is gone: {sorted(map(str, committed - fresh))}"
