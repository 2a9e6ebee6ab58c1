"""Computes exp(x) without subtracting the row's maximum: right for small values, inf / inf = NaN past x = 88.7,
and 0 / 0 = NaN when every exp(x) underflows (a row of -1e4)."""

FAILS = ["cuda_softmax_stable"]

SOFTMAX_SOURCE = SOFTMAX_SOURCE.replace("expf(row[j] - m)", "expf(row[j])")  # noqa: F821
assert "expf(row[j])" in SOFTMAX_SOURCE and "row[j] - m" not in SOFTMAX_SOURCE
