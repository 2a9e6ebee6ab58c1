"""Counts C twice, read and written, although the accumulators start at zero and C is only stored."""

FAILS = ["traffic"]

_right_traffic = traffic  # noqa: F821


def traffic(M, N, K, dtype, tiling, out_dtype=None):
    result = _right_traffic(M, N, K, dtype, tiling, out_dtype)
    result["c_writes"] *= 2
    result["global_intensity"] = result["flops"] / (result["global_reads"] + result["c_writes"])
    return result
