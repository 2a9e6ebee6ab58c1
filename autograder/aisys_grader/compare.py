"""Comparing a student's result with the reference: tolerances per dtype, and messages that help.

A message says what differed (which key, which element), expected against
got, and the largest error, but shows an array only by its shape, dtype and a
few values. Inside `redacted()` (hidden cases, and everything graded after hidden
data has reached the student's code) it shows no value at all: kinds, shapes,
where it differed and by how much, so feedback never carries a hidden input, a
hidden answer, or anything the student's code could have copied from them.
"""

import builtins
import contextlib
import contextvars
import math

import numpy as np

from .plain import kind_of


class CheckFailure(AssertionError):
    """A check found the student's code wrong; the message says how."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it in a notebook: the message alone. The frames are the grader's own, not the
        student's (their code's error, if it raised one, is in the message)."""
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]


class CheckSkipped(Exception):
    """A check cannot run on this machine (it needs a GPU): it neither passes nor fails, and scores nothing.

    Only the check itself raises it (see `checks.require_gpu`): whatever a student's function
    raises reaches the check as a CheckFailure (bridge.reply), so student code cannot skip a check.
    `optional`: the notebook is graded without it, its points left out (a speed check), rather than
    not at all.
    """

    def __init__(self, message: str, optional: bool = False):
        super().__init__(message)
        self.optional = optional


# (rtol, atol) per dtype, as torch.testing.assert_close uses by default; Python
# floats are float64. Integers and booleans compare exactly.
TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
}


SHORT_NAMES = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # as exercises say them


def tolerance(dtype) -> tuple[float, float]:
    """Default (rtol, atol) for a dtype name ("float16" or "fp16") or numpy dtype; (0, 0) for exact types."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return TOLERANCES.get(SHORT_NAMES.get(name, name), (0.0, 0.0))


_REDACTED = contextvars.ContextVar("aisys_redacted", default=False)


@contextlib.contextmanager
def redacted(on: bool = True):
    """Inside, messages describe values by kind and shape only (see the module docstring); nesting never
    turns it off."""
    token = _REDACTED.set(_REDACTED.get() or on)
    try:
        yield
    finally:
        _REDACTED.reset(token)


def redacting() -> bool:
    return _REDACTED.get()


def exception_name(name) -> str:
    """An exception's class name as a message may show it: a student can name a class anything, so inside
    `redacted()` only Python's own exception names are shown."""
    builtin = isinstance(name, str) and isinstance(getattr(builtins, name, None), type) and \
        issubclass(getattr(builtins, name), BaseException)
    return str(name) if builtin or not redacting() else "an exception"


def _kind(value) -> str:
    """A value by its kind and size, never its contents."""
    if isinstance(value, np.ndarray):
        return f"array(shape={value.shape}, dtype={value.dtype})"
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, dict):
        return f"a mapping of {len(value)} keys"
    names = {bool: "a boolean", int: "an integer", float: "a number", type(None): "None"}
    return names.get(type(value), f"a value of type {type(value).__name__}")


def describe(value, limit: int = 6) -> str:
    """A short description of a value: arrays by shape, dtype and their first few elements (inside
    `redacted()`, by kind and size only)."""
    if redacting():
        return _kind(value)
    if isinstance(value, np.ndarray):
        head = np.array2string(value.ravel()[:limit], precision=4, separator=", ")
        more = ", ..." if value.size > limit else ""
        return f"array(shape={value.shape}, dtype={value.dtype}, values={head[:-1]}{more}])"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def shown(value, spec: str = "") -> str:
    """A value as a check's own message quotes it: `format(value, spec)` outside `redacted()` (`spec="!r"`: its
    repr), so visible cases read as they always did; inside, its kind and size only, as `describe` gives it."""
    if redacting():
        return _kind(value)
    return repr(value) if spec == "!r" else format(value, spec)


def unredacted(text: str, instead: str = "") -> str:
    """`text` outside `redacted()`, `instead` inside: for a clause of a message that quotes values of a case
    (an input, the expected answer, what the student's code gave) rather than the rule it breaks."""
    return instead if redacting() else text


def raised(error) -> str:
    """What a student's code raised, given as 'Type: message' (a rank's error, a driver's record): all of it
    outside `redacted()`; inside, the exception's name as `exception_name` allows, without its message."""
    if not redacting():
        return str(error)
    name = str(error).split(":", 1)[0].strip()
    return f"{exception_name(name)} (its message is not shown here: it could carry the hidden data)"


def _close(got: float, expected: float, rtol: float, atol: float) -> bool:
    if math.isnan(expected) or math.isinf(expected):
        return (math.isnan(expected) and math.isnan(got)) or got == expected
    return abs(got - expected) <= atol + rtol * abs(expected)


def _relative(got: float, expected: float) -> str:
    if expected == 0 or not math.isfinite(got - expected):
        return ""
    return f" (relative error {abs(got - expected) / abs(expected):.2g})"


def assert_close(got, expected, *, rtol: float | None = None, atol: float | None = None, where: str = "result"):
    """Raise CheckFailure unless `got` matches `expected` in kind, structure and value within tolerance.

    `expected` comes from the reference and is plain data; `got` must already be plain data.
    """
    got_kind, expected_kind = kind_of(got), kind_of(expected)
    numeric = {"integer", "number"}
    if got_kind != expected_kind and not (got_kind in numeric and expected_kind in numeric):
        raise CheckFailure(f"{where}: expected {expected_kind} data like {describe(expected)}, got {describe(got)}")

    if expected_kind == "mapping":
        missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
        if missing or extra:
            given = f"{len(got)} keys, missing {sorted(missing)}" if redacting() else f"{sorted(got)}"
            raise CheckFailure(f"{where}: expected keys {sorted(expected)}, got {given}")
        for key in expected:
            assert_close(got[key], expected[key], rtol=rtol, atol=atol, where=f"{where}[{key!r}]")
    elif expected_kind == "list":
        if len(got) != len(expected):
            raise CheckFailure(f"{where}: expected a list of {len(expected)} items, got {len(got)}")
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_close(g, e, rtol=rtol, atol=atol, where=f"{where}[{i}]")
    elif expected_kind == "array":
        _assert_arrays_close(got, expected, rtol, atol, where)
    elif expected_kind in numeric:
        default = tolerance("float64") if "number" in (got_kind, expected_kind) else (0.0, 0.0)
        r, a = (default[0] if rtol is None else rtol), (default[1] if atol is None else atol)
        if not _close(float(got), float(expected), r, a):
            relative = _relative(float(got), float(expected))
            if redacting():
                raise CheckFailure(f"{where}: differs from the reference{relative or ''}")
            raise CheckFailure(f"{where}: expected {expected!r}, got {got!r}{relative}")
    elif got != expected:
        if redacting():
            raise CheckFailure(f"{where}: differs from the reference")
        raise CheckFailure(f"{where}: expected {describe(expected)}, got {describe(got)}")


def _assert_arrays_close(got: np.ndarray, expected: np.ndarray, rtol, atol, where: str):
    if got.shape != expected.shape:
        raise CheckFailure(f"{where}: expected shape {expected.shape}, got shape {got.shape}")
    default = tolerance(expected.dtype)
    rtol, atol = (default[0] if rtol is None else rtol), (default[1] if atol is None else atol)
    g, e = got.astype(np.float64), expected.astype(np.float64)
    exact = got.dtype.kind in "iub" and expected.dtype.kind in "iub" and rtol == atol == 0
    if exact:  # integers compare as integers: float64 cannot tell int64s apart beyond 2**53
        bad = got != expected
    else:
        bad = ~(np.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True))
    if not bad.any():
        return
    error = np.where(bad, np.abs(g - e), 0.0)
    error = np.where(np.isnan(error) | (bad & (error == 0)), np.inf, error)  # NaN, or too close for float64: worst
    worst = np.unravel_index(int(np.argmax(error)), error.shape)
    if redacting():
        shown = (_relative(float(g[worst]), float(e[worst])) or " (not finite, or against 0)").strip(" ()")
    else:
        shown = (f"expected {expected[worst]}, got {got[worst]}" if exact
                 else f"expected {e[worst]:.6g}, got {g[worst]:.6g}")
    raise CheckFailure(
        f"{where}: {int(bad.sum())} of {bad.size} elements differ (shape {expected.shape}, dtype {expected.dtype}); "
        f"largest error at index {tuple(int(i) for i in worst)}: {shown} (rtol={rtol:g}, atol={atol:g})"
    )


FORMATS = {"fp32": "float32", "fp16": "float16", "bf16": "float32"}  # what the bridge carries each format in


def assert_format(got, dtype: str, *, where: str = "result") -> None:
    """Raise CheckFailure unless the array `got` is data of `dtype`: an exercise's format name ("fp32", "fp16",
    "bf16") or a numpy dtype name ("int32"). bf16 travels as float32 (numpy has no bfloat16), so a bf16 result
    must also hold only values bf16 can: the low 16 bits of each float32 zero. That catches a float32 result
    returned where bf16 was asked for, which the values alone within bf16's tolerance would let through."""
    if not isinstance(got, np.ndarray):
        return  # assert_close reports a result of the wrong kind
    wanted = FORMATS.get(dtype, dtype)
    if got.dtype != np.dtype(wanted):
        carried = " (bf16 data is carried as float32)" if dtype == "bf16" else ""
        raise CheckFailure(f"{where}: expected dtype {dtype}{carried}, got {got.dtype}")
    if dtype == "bf16":
        bits = np.ascontiguousarray(got).view(np.uint32)
        odd = ((bits & 0xFFFF) != 0) & ~np.isnan(got)
        if odd.any():
            first = tuple(int(i) for i in np.argwhere(odd)[0])
            value = unredacted(f" ({got[first]!r} at index {first})")
            raise CheckFailure(f"{where}: expected bf16 values, but {int(odd.sum())} of {got.size} elements hold "
                               f"more bits than bf16 has{value}: the result was kept in float32 instead of being "
                               "rounded to bf16 (store it into a bf16 tensor)")
