"""The roofline model: how fast an operation can run, given peak compute, memory bandwidth and its arithmetic intensity.

A kernel that does F floating-point operations and moves B bytes to and from
main memory has arithmetic intensity I = F / B (FLOP/byte). On a chip with
peak compute P (FLOP/s) and bandwidth W (bytes/s) it cannot run faster than

    attainable(I) = min(P, W * I)

(Williams, Waterman and Patterson, "Roofline: an insightful visual performance
model for multicore architectures", CACM 2009). Below the ridge point P / W the
kernel is memory-bound; above it, compute-bound.

Costs here count the minimum traffic: every input read once from main memory
and every output written once, as a kernel that keeps its working set on chip
would. A multiply-add counts as two FLOPs, as in every datasheet.
"""

import math
from dataclasses import dataclass

from ._validate import nonnegative_number, positive_int, positive_number
from .dtypes import bytes_per_element

# FLOPs per element of a row-wise softmax: max, subtract, exp, sum, divide.
SOFTMAX_FLOPS_PER_ELEMENT = 5


@dataclass(frozen=True)
class Cost:
    """Work and memory traffic of one operation."""

    flops: float
    bytes: float

    def __post_init__(self):
        nonnegative_number("flops", self.flops)
        nonnegative_number("bytes", self.bytes)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP/byte."""
        return self.flops / self.bytes if self.bytes else math.inf


def attainable(peak_flops: float, bandwidth: float, intensity: float) -> float:
    """Attainable FLOP/s: the lower of the compute roof and the memory roof at this intensity."""
    peak_flops = positive_number("peak_flops", peak_flops)
    bandwidth = positive_number("bandwidth", bandwidth)
    intensity = nonnegative_number("intensity", intensity)
    return min(peak_flops, bandwidth * intensity)


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """The intensity (FLOP/byte) at which the memory roof meets the compute roof."""
    return positive_number("peak_flops", peak_flops) / positive_number("bandwidth", bandwidth)


def bound(peak_flops: float, bandwidth: float, intensity: float) -> str:
    """'memory' if the kernel sits left of the ridge point, else 'compute'."""
    intensity = nonnegative_number("intensity", intensity)
    return "memory" if intensity < ridge_point(peak_flops, bandwidth) else "compute"


def gemm(M: int, N: int, K: int, dtype: str = "fp16") -> Cost:
    """C (M x N) = A (M x K) @ B (K x N): 2MNK FLOPs; A and B read once, C written once."""
    M, N, K = positive_int("M", M), positive_int("N", N), positive_int("K", K)
    size = bytes_per_element(dtype)
    return Cost(flops=2 * M * N * K, bytes=(M * K + K * N + M * N) * size)


def gemv(M: int, K: int, dtype: str = "fp16") -> Cost:
    """y (M) = A (M x K) @ x (K): a GEMM with N = 1, whose intensity stays near 2 / bytes_per_element."""
    return gemm(M, 1, K, dtype)


def elementwise(n: int, dtype: str = "fp32", inputs: int = 1, outputs: int = 1, flops_per_element: int = 1) -> Cost:
    """An elementwise op over n elements (z = x + y: inputs=2, outputs=1, flops_per_element=1)."""
    n = positive_int("n", n)
    inputs = positive_int("inputs", inputs)
    outputs = positive_int("outputs", outputs)
    flops_per_element = positive_int("flops_per_element", flops_per_element)
    return Cost(flops=n * flops_per_element, bytes=n * (inputs + outputs) * bytes_per_element(dtype))


def softmax(rows: int, cols: int, dtype: str = "fp32") -> Cost:
    """Row-wise softmax of a rows x cols matrix, fused: read once, write once."""
    n = positive_int("rows", rows) * positive_int("cols", cols)
    return Cost(flops=SOFTMAX_FLOPS_PER_ELEMENT * n, bytes=2 * n * bytes_per_element(dtype))


def classify(cost: Cost, peak_flops: float, bandwidth: float) -> dict:
    """Where an operation sits on a chip's roofline: intensity, attainable FLOP/s, bound and minimum time.

    The minimum time is that of the slower roof: max(flops / peak, bytes / bandwidth).
    """
    return {
        "intensity": cost.intensity,
        "attainable_flops": attainable(peak_flops, bandwidth, cost.intensity),
        "bound": bound(peak_flops, bandwidth, cost.intensity),
        "seconds": max(cost.flops / peak_flops, cost.bytes / bandwidth),
    }

