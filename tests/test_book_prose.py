"""The book's prose types no measured number: each number with a unit of time or rate, and each ratio, is
either glued from data (aisys.prose + myst-nb's glue) or marked `{cited}` as a datasheet's or a paper's."""

import doctest
import re

import pytest

from aisys import prose
from notebooks import ROOT

PAGES = sorted(p for p in (ROOT / "book").glob("*/*.md") if p.parent.name not in {"exercises", "node_modules"})
UNITS = r"(?:[PTGMk]?B/s|[TGP]?FLOP/s|TFLOPS|Gb/s|GT/s|GHz|MHz|ms|µs|us|ns|s)"
TYPED = [
    ("number with a unit", re.compile(rf"(?<![\w.,])\d[\d,]*(?:\.\d+)?\s?{UNITS}(?![\w/])")),
    ("ratio", re.compile(r"(?<![\w.,])\d+(?:\.\d+)?[x×](?![\w(])|(?<![\w.,])\d+\.\d+\s[x×](?!\s*\d)")),
]
# What is not prose: front matter, fenced blocks (code cells, figures, directives), display and inline
# maths, inline code, and roles (a glued value, a cited figure, a cross-reference).
FENCE = re.compile(r"^(```|:::)")
NOT_PROSE = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$|\{[\w:-]+\}`[^`]*`|`[^`\n]*`", re.S)


def prose_lines(text: str):
    """(line number, text) of each line of prose, with maths, code and roles blanked out."""
    lines = text.split("\n")
    start = 0
    if lines and lines[0] == "---":
        start = lines.index("---", 1) + 1
    fence = None
    kept = []
    for number, line in enumerate(lines[start:], start + 1):
        marker = FENCE.match(line.lstrip())
        if fence is None and marker:
            fence = line.lstrip()[:3] + re.match(r"[`:]*", line.lstrip()).group(0)[3:]
            continue
        if fence is not None:
            if line.strip() == fence:
                fence = None
            continue
        kept.append((number, line))
    body = "\n".join(line for _, line in kept)
    blanked = NOT_PROSE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), body)
    return [(number, line) for (number, _), line in zip(kept, blanked.split("\n"))]


def typed_numbers(text: str) -> list[str]:
    return [f"line {number}: {kind} '{m.group(0)}'" for number, line in prose_lines(text)
            for kind, pattern in TYPED for m in pattern.finditer(line)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT / "book")))
def test_no_number_is_typed_into_prose(page):
    found = typed_numbers(page.read_text())
    assert not found, (f"{page.relative_to(ROOT)} types numbers into its prose:\n  " + "\n  ".join(found)
                       + "\nGlue a measured or computed number from its data (aisys.prose words it; paste it with "
                       "{glue:text}`key`), or mark a datasheet's or a paper's figure {cited}`...` and name the source.")


@pytest.mark.parametrize("line, caught", [
    ("the kernel runs in 0.69x of the time SDPA needs", True),
    ("L2 delivers 15.9 TB/s, about 5× HBM", True),
    ("exchanging 32 MiB took 262 µs", True),
    ("each step can take 4 ms", True),
    ("a 128 x 256 tile of 4 x 4 x 4 steps", False),
    ("datasheet: {cited}`3.35 TB/s`, measured {glue:text}`copy_rate`", False),
    ("$$t = 2.5\\,\\mu s$$ and `bench(1.2 ms)` and $3.4 ms$", False),
    ("compute capability 9.x, 32 threads, 80 GB, 2:4, F(4x4, 3x3)", False),
])
def test_the_check_tells_typed_from_rendered(line, caught):
    assert bool(typed_numbers(line)) is caught


def test_fenced_blocks_are_not_prose():
    page = "---\nfront: 1 ms\n---\n# t\n\n```{code-cell} ipython3\nprint('2 ms')\n```\n\n:::{note}\n3 ms\n:::\n4 ms\n"
    assert typed_numbers(page) == ["line 13: number with a unit '4 ms'"]


def test_prose_words_a_comparison_one_way():
    assert doctest.testmod(prose).failed == 0
    assert prose.time_against(1.44, 1.0, "SDPA") == "takes 1.44× as long as SDPA (0.69× its speed)"
    assert prose.time_against(1.0, 1.44, "SDPA") == "runs 1.44× as fast as SDPA (0.69× its time)"
    assert prose.rate(7.46e12, "B/s") == "7.46 TB/s" and prose.duration(2.62e-4) == "262 µs"
    assert prose.duration(59.5) == "59.5 s" and prose.duration(11135) == "3.09 hours" and \
        prose.duration(90) == "1.5 minutes" and prose.duration(5 * 86400) == "5 days"
    assert prose.rate(3.2e14, "FLOP/s") == "320 TFLOP/s" and prose.significant(1234.6) == "1,235"
    with pytest.raises(ValueError, match="baseline_seconds"):
        prose.time_against(1.0, 0.0, "SDPA")
    with pytest.raises(TypeError, match="text"):
        prose.glue("key", 1.5)
