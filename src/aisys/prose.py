"""How the book words a number it measured: one helper per kind of statement, used by every page.

A page never types a measured number into its prose. A code cell loads the stored measurement,
words it with these helpers and glues the text (`glue`); the prose pastes it with
``{glue:text}`key` ``. A comparison of two times is worded one way everywhere: "takes 1.44× as
long as SDPA (0.69× its speed)", never "runs in 0.69x of the time", which reads as the opposite.
A figure typed on purpose (a datasheet's or a paper's) is marked ``{cited}`3.35 TB/s` `` and its
source named on the page; `tests/test_book_prose.py` holds every page to this.
"""

import math

# SI prefixes for rates and sizes, largest first; times get their own units.
_PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]
_TIME_UNITS = [(1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")]
_LONG_TIMES = [(86400.0, "days"), (3600.0, "hours"), (60.0, "minutes")]  # from a minute up: what a reader counts in


def _positive(what: str, value) -> float:
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive, finite number, got {value!r}")
    return value


def significant(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant figures, without exponent or trailing zeros past the point:
    1234.6 -> '1,235' (thousands grouped), 0.012345 -> '0.0123', 7.2 -> '7.2'."""
    value = float(value)
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(digits - 1 - math.floor(math.log10(abs(value))), 0)
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def rate(value: float, unit: str, digits: int = 3) -> str:
    """A rate or a size with the SI prefix that keeps it readable: rate(7.46e12, 'B/s') -> '7.46 TB/s',
    rate(3.2e14, 'FLOP/s') -> '320 TFLOP/s'."""
    value = _positive("the rate", value)
    scale, prefix = next(((s, p) for s, p in _PREFIXES if value >= s), _PREFIXES[-1])
    return f"{significant(value / scale, digits)} {prefix}{unit}"


def duration(seconds: float, digits: int = 3) -> str:
    """A time in the unit that keeps it between 1 and 1000 below a minute, duration(2.62e-4) -> '262 µs', and in
    minutes, hours or days from a minute up: duration(11135) -> '3.09 hours'."""
    seconds = _positive("the duration in seconds", seconds)
    if seconds >= 60:
        scale, unit = next((s, u) for s, u in _LONG_TIMES if seconds >= s)
        return f"{significant(seconds / scale, digits)} {unit}"
    scale, unit = next(((s, u) for s, u in _TIME_UNITS if seconds >= s), _TIME_UNITS[-1])
    return f"{significant(seconds / scale, digits)} {unit}"


def times(value: float) -> str:
    """A ratio as the book writes it: two decimals and the multiplication sign, '1.44×'."""
    return f"{_positive('the ratio', value):.2f}×"


def time_against(seconds: float, baseline_seconds: float, baseline: str) -> str:
    """The one wording of "this took `seconds`, the baseline `baseline_seconds`":

    >>> time_against(1.44e-3, 1.0e-3, "SDPA")
    'takes 1.44× as long as SDPA (0.69× its speed)'
    >>> time_against(0.8e-3, 1.0e-3, "cuBLAS")
    'runs 1.25× as fast as cuBLAS (0.80× its time)'
    """
    seconds = _positive("seconds", seconds)
    baseline_seconds = _positive("baseline_seconds", baseline_seconds)
    speed = baseline_seconds / seconds
    if f"{speed:.2f}" == "1.00":
        return f"runs as fast as {baseline} (within 0.5%)"
    if speed < 1:
        return f"takes {times(1 / speed)} as long as {baseline} ({times(speed)} its speed)"
    return f"runs {times(speed)} as fast as {baseline} ({times(1 / speed)} its time)"


def rate_against(value: float, baseline_value: float, baseline: str) -> str:
    """A throughput (higher is better) against a baseline's, as a multiple of it:
    rate_against(356e9, 450e9, "the link's 450 GB/s") -> "0.79× the link's 450 GB/s"."""
    return f"{times(_positive('value', value) / _positive('baseline_value', baseline_value))} {baseline}"


def percent(value: float, limit: float, digits: int = 0) -> str:
    """`value` as a percentage of `limit`: percent(2.55e12, 3.35e12) -> '76%'."""
    return f"{100 * float(value) / _positive('limit', limit):.{digits}f}%"


def glue(key: str, text: str) -> str:
    """Store `text` under `key` for the page's prose (``{glue:text}`key` ``), and return it.

    Only the book's build (myst-nb) reads glued values; a page run as a plain notebook still works."""
    if not isinstance(text, str):
        raise TypeError(f"text must be the worded string (aisys.prose's helpers make it), got {type(text).__name__}")
    try:
        from myst_nb import glue as _glue
    except ImportError:  # the book's packages are not installed: nothing will read it
        return text
    _glue(key, text, display=False)
    return text
