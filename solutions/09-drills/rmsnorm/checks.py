"""Checks: RMSNorm in torch for float32, float16 and bfloat16 tensors, computed in float32, returned in x's dtype.

The truth is aisys.inference.model.rms_norm in float64 on the same values (float16 and bfloat16 inputs are rounded
to their dtype first), compared within the tolerance of x's dtype, and the result must be in x's dtype. Hidden cases
add, on every seed: float16 rows of a spread of 300, whose squares pass 65504 (a norm computed in float16 turns
them into zeros); float32 rows of tiny values, whose mean square is below eps (where eps outside the square root
shows); a zero row; rows of one element; no rows; a 3-D x; every dtype; then a property check over arrays drawn by
hypothesis, each dtype.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.inference.model import rms_norm
from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import FORMATS, tolerance
from aisys_grader.low_precision import as_sent

EPS = 1e-6


def _truth(x, weight, eps, dtype) -> np.ndarray:
    return rms_norm(np.asarray(x, dtype=np.float64), np.asarray(weight, dtype=np.float64), eps)


def _case(x, rng, dtype, eps=EPS) -> dict:
    x = np.asarray(x, dtype=np.float64)
    weight = 1 + 0.5 * rng.standard_normal(x.shape[-1])
    return {"x": as_sent(x, dtype), "weight": as_sent(weight, dtype), "eps": eps, "dtype": dtype}


def _rows(dtype, n):
    """Rows of n values rounded to dtype (up to 300: float16 squares overflow), a weight, eps and the dtype."""
    sent = lambda a: as_sent(a, dtype)  # noqa: E731
    return st.fixed_dictionaries({
        "x": hnp.arrays(np.float64, st.tuples(st.integers(0, 4), st.just(n)), elements=st.floats(-300, 300)).map(sent),
        "weight": hnp.arrays(np.float64, n, elements=st.floats(-2, 2)).map(sent),
        "eps": st.sampled_from([1e-6, 1e-5]), "dtype": st.just(dtype)})


CASES = st.tuples(st.sampled_from(["fp32", "fp16", "bf16"]), st.integers(1, 8)).flatmap(lambda t: _rows(*t))


def _tolerance(case) -> tuple[float, float]:
    return tolerance(case["dtype"])


def _format(case) -> str:
    return case["dtype"]


def _hint(case, got, expected) -> str:
    if not isinstance(got, np.ndarray):
        return ""
    if got.dtype != np.dtype(FORMATS[case["dtype"]]) or case["dtype"] == "bf16" and \
            (np.ascontiguousarray(got).view(np.uint32) & 0xFFFF).any():
        return "Return a tensor of x's dtype: compute in float32, then cast back (.type_as(x) or .to(x.dtype))"
    if case["dtype"] == "fp16" and got.shape == expected.shape and np.abs(case["x"]).max(initial=0) > 256:
        return "float16's largest number is 65504: the square of anything above 256 is inf. Square in float32"
    return ""


@check(points=2)
def rms_norm_rows(student, rng, hidden):
    """rms_norm(x, weight, eps) in float32, float16 and bfloat16: statistics in float32, the result in x's dtype."""
    cases = [_case([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 0.0, 2.0]], rng, "fp32"),
             _case(rng.standard_normal((3, 8)), rng, "fp16"),
             _case(rng.standard_normal((3, 8)), rng, "bf16")]
    if hidden:
        n = int(rng.integers(5, 12))
        cases = [_case(300 * rng.standard_normal((2, 64)), rng, "fp16"),  # squares above 65504
                 _case(1e-4 * rng.standard_normal((3, n)), rng, "fp32"),  # mean(x^2) about 1e-8, below eps
                 _case(np.vstack([np.zeros(n), rng.standard_normal(n)]), rng, "fp32"),  # a zero row
                 _case(rng.uniform(-3, 3, (4, 1)), rng, "bf16"),  # one element per row
                 _case(np.zeros((0, n)), rng, "fp16"),  # no rows
                 _case(rng.standard_normal((2, 3, n)), rng, "bf16")]
        cases += [_case(2 * rng.standard_normal((3, 1000)) + 0.5, rng, dtype) for dtype in ("fp32", "fp16", "bf16")]
    compare_cases(student, "rms_norm_arrays", cases, _truth, returns="array", hidden=hidden, tolerance=_tolerance,
                  dtype=_format, hint=_hint)
    if hidden:
        compare_property(student, "rms_norm_arrays", CASES, _truth, rng=rng, returns="array", hidden=hidden,
                         tolerance=_tolerance, dtype=_format, hint=_hint, examples=30)
