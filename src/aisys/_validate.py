"""Argument checks shared by the reference functions: each names the argument and what was expected.

Each check first accepts a plain int or float by its exact type: the abstract-class checks below it (`Real`,
`Integral`) cost microseconds, and simulators call these checks millions of times (the book's batching page).
Booleans never take the shortcut: `type(True) is bool`, not int."""

import math
from numbers import Integral, Real

import numpy as np


def positive_number(name: str, value) -> float:
    """A finite number > 0 (bools are not numbers here)."""
    if (type(value) is float or type(value) is int) and 0 < value < math.inf:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def nonnegative_number(name: str, value) -> float:
    """A number >= 0; +inf is allowed (an operation with no memory traffic has infinite intensity)."""
    if (type(value) is float or type(value) is int) and value >= 0:  # NaN fails >= 0
        return float(value)
    if isinstance(value, bool) or not isinstance(value, Real) or math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def positive_int(name: str, value) -> int:
    """An integer >= 1."""
    if type(value) is int and value >= 1:
        return value
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def nonnegative_int(name: str, value) -> int:
    """An integer >= 0."""
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return int(value)


def one_of(name: str, value, choices) -> str:
    """One of a fixed set of names."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def finite_array(name: str, value, *, ndim: int | None = None, nonempty: bool = False, kinds: str = "f") -> np.ndarray:
    """An array of finite numbers whose dtype kind is in `kinds` ("f": floats; "fiu": any real numbers), with `ndim`
    dimensions where given and at least one element where `nonempty`."""
    array = np.asarray(value)
    if (array.dtype.kind not in kinds or (ndim is not None and array.ndim != ndim) or (nonempty and array.size == 0)
            or not np.isfinite(array).all()):
        what = "floats" if kinds == "f" else "numbers"
        shape = "" if ndim is None else f"{ndim}-d "
        article = "a non-empty " if nonempty else ("a " if ndim is not None else "an ")
        raise ValueError(f"{name} must be {article}{shape}array of finite {what}, got {array.dtype} of shape "
                         f"{array.shape}")
    return array
