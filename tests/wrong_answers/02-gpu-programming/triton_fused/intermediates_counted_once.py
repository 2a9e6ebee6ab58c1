"""Counts each intermediate once (written or read, not both): 5 MN + N elements instead of 7 MN + N."""

FAILS = ["traffic"]


def unfused_bytes(M, N, dtype="fp32"):
    n = M * N
    inputs_and_output = roofline.elementwise(n, dtype, inputs=2, outputs=1).bytes  # noqa: F821 (x, residual; y)
    intermediates = 2 * n * bytes_per_element(dtype)  # noqa: F821 (t and u, once each)
    return inputs_and_output + intermediates + N * bytes_per_element(dtype)  # noqa: F821
