"""Checks: operation costs, arithmetic intensity and the roofline bound.

Visible cases use fp32 and fp16 only; hidden cases draw shapes, formats and
chips from the seed, and include the edges: size-1 dimensions, sub-byte
int4, zero and infinite intensity, and an intensity exactly at the ridge.
"""

import math
from dataclasses import asdict

from aisys import dtypes, roofline
from aisys.hardware import CHIPS

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, unredacted

VISIBLE_DTYPES = ["fp32", "fp16"]
ALL_DTYPES = list(dtypes.BITS)


def _dtype(rng, hidden: bool) -> str:
    return str(rng.choice(ALL_DTYPES if hidden else VISIBLE_DTYPES))


def _size(rng) -> int:
    """Sizes from 1 to about 10^5, log-uniform, odd ones included."""
    return int(10 ** rng.uniform(0, 5))


@check(points=1)
def bytes_per_element(student, rng, hidden):
    """bytes_per_element(dtype) gives each format's size in bytes."""
    cases = [{"dtype": d} for d in (ALL_DTYPES if hidden else VISIBLE_DTYPES)]
    compare_cases(student, "bytes_per_element", cases, dtypes.bytes_per_element, returns="number", hidden=hidden)


def _cost_hint(student):
    """hint(case, got, expected) for a {"flops", "bytes"} result: the student's bytes_per_element when it is wrong
    for the case's dtype (the cost rests on it), else what a typical ratio to the right answer means."""
    def hint(case, got, expected) -> str:
        size = dtypes.bytes_per_element(case["dtype"])
        try:
            theirs = student.call("bytes_per_element", returns="number", dtype=case["dtype"])
        except CheckFailure:
            theirs = None
        if theirs != size:
            called = unredacted(f"({case['dtype']!r})")
            return (f"Your bytes_per_element{called} is wrong, and the bytes here are counted with it: fix "
                    "bytes_per_element first (its check says how).")
        ratio = {key: got[key] / expected[key] for key in ("flops", "bytes")
                 if isinstance(got.get(key), (int, float)) and expected[key]}
        if ratio.get("flops") == 0.5:
            return "A multiply-add is two FLOPs, as in every datasheet."
        if size != 1 and ratio.get("bytes") == 1 / size:
            return "That counts elements: bytes are elements times bytes_per_element(dtype)."
        return ""
    return hint


@check(points=2)
def gemm_cost(student, rng, hidden):
    """gemm_cost(M, N, K, dtype) counts 2MNK FLOPs and the bytes of A, B and C."""
    cases = [{"M": 128, "N": 256, "K": 64, "dtype": "fp16"}, {"M": 4096, "N": 1, "K": 4096, "dtype": "fp32"}]
    if hidden:
        cases = [{"M": 1, "N": 1, "K": 1, "dtype": "int4"}, {"M": 8192, "N": 8192, "K": 8192, "dtype": "bf16"}]
        cases += [{"M": _size(rng), "N": _size(rng), "K": _size(rng), "dtype": _dtype(rng, hidden)} for _ in range(12)]

    def reference(M, N, K, dtype):
        return asdict(roofline.gemm(M, N, K, dtype))

    compare_cases(student, "gemm_cost", cases, reference, returns="mapping", hidden=hidden, hint=_cost_hint(student))


@check(points=1)
def elementwise_cost(student, rng, hidden):
    """elementwise_cost(n, dtype, inputs, outputs, flops_per_element) counts reads and writes."""
    cases = [{"n": 1_000_000, "dtype": "fp32", "inputs": 2, "outputs": 1, "flops_per_element": 1},
             {"n": 4096, "dtype": "fp16", "inputs": 1, "outputs": 1, "flops_per_element": 8}]
    if hidden:
        cases = [{"n": 1, "dtype": "int4", "inputs": 1, "outputs": 1, "flops_per_element": 1},
                 {"n": 3000, "dtype": "bf16", "inputs": 2, "outputs": 1, "flops_per_element": 1}]
        cases += [{"n": _size(rng), "dtype": _dtype(rng, hidden), "inputs": int(rng.integers(1, 4)),
                   "outputs": int(rng.integers(1, 3)), "flops_per_element": int(rng.integers(1, 20))}
                  for _ in range(12)]

    def reference(**case):
        return asdict(roofline.elementwise(**case))

    compare_cases(student, "elementwise_cost", cases, reference, returns="mapping", hidden=hidden,
                  hint=_cost_hint(student))


@check(points=1)
def softmax_cost(student, rng, hidden):
    """softmax_cost(rows, cols, dtype): 5 FLOPs per element, one read and one write."""
    cases = [{"rows": 32, "cols": 1024, "dtype": "fp32"}, {"rows": 1, "cols": 50257, "dtype": "fp16"}]
    if hidden:
        cases = [{"rows": 1, "cols": 1, "dtype": "bf16"}, {"rows": 7, "cols": 3, "dtype": "int4"}]
        cases += [{"rows": _size(rng), "cols": _size(rng), "dtype": _dtype(rng, hidden)} for _ in range(12)]

    def reference(rows, cols, dtype):
        return asdict(roofline.softmax(rows, cols, dtype))

    compare_cases(student, "softmax_cost", cases, reference, returns="mapping", hidden=hidden, hint=_cost_hint(student))


def _chip_cases(rng, count: int) -> list[dict]:
    """Intensities on both sides of real chips' ridge points, plus the edges.

    The cases exactly at the ridge use numbers whose products and quotients are exact in
    floating point, so `intensity < peak / bandwidth` and `bandwidth * intensity < peak`
    agree there, as they should.
    """
    cases = []
    for chip in rng.choice(list(CHIPS.values()), size=count):
        dtype = str(rng.choice(list(chip.peak_flops)))
        peak, bandwidth = chip.peak(dtype), chip.memory_bandwidth
        for side in (-1, 1):
            intensity = peak / bandwidth * 10 ** (side * rng.uniform(0.3, 2))
            cases.append({"peak_flops": peak, "bandwidth": bandwidth, "intensity": float(intensity)})
    cases += [
        {"peak_flops": 1e12, "bandwidth": 1e11, "intensity": 10.0},  # at the ridge
        {"peak_flops": 6.4e13, "bandwidth": 3.2e12, "intensity": 20.0},  # at the ridge
        {"peak_flops": 1e12, "bandwidth": 1e11, "intensity": 0.0},
        {"peak_flops": 1e12, "bandwidth": 1e11, "intensity": float("inf")},
    ]
    return cases


VISIBLE_ROOFLINE_CASES = [
    {"peak_flops": 989.4e12, "bandwidth": 3.35e12, "intensity": 0.25},  # H100, fp32 vector add: memory-bound
    {"peak_flops": 989.4e12, "bandwidth": 3.35e12, "intensity": 2730.7},  # H100, 8192^3 bf16 GEMM: compute-bound
]


@check(points=1)
def attainable_flops(student, rng, hidden):
    """attainable_flops(peak_flops, bandwidth, intensity) is the lower of the two roofs."""
    cases = _chip_cases(rng, 6) if hidden else VISIBLE_ROOFLINE_CASES
    compare_cases(student, "attainable_flops", cases, roofline.attainable, returns="number", hidden=hidden,
                  hint=_attainable_hint)


def _attainable_hint(case, got, expected) -> str:
    if any(math.isclose(got * scale, expected) for scale in (1e9, 1e12)):
        return "The result is in FLOP/s, the unit of peak_flops and of bandwidth times intensity, not TFLOP/s."
    if got > case["peak_flops"]:
        return "No kernel runs faster than the chip's peak: take the lower of the two roofs."
    return "attainable = min(peak_flops, bandwidth * intensity)."


@check(points=1)
def bound(student, rng, hidden):
    """bound(peak_flops, bandwidth, intensity) is 'memory' left of the ridge point, 'compute' from it on."""
    cases = _chip_cases(rng, 6) if hidden else VISIBLE_ROOFLINE_CASES
    compare_cases(student, "bound", cases, roofline.bound, returns="string", hidden=hidden, hint=_bound_hint)


def _bound_hint(case, got, expected) -> str:
    if case["intensity"] == case["peak_flops"] / case["bandwidth"]:
        return "At the ridge point itself the kernel reaches peak compute: it is compute-bound from the ridge on."
    return ("The ridge point is peak_flops / bandwidth, in FLOP/byte like the intensity (bandwidth / peak_flops "
            "is bytes per FLOP): memory-bound below it, compute-bound from it on.")
