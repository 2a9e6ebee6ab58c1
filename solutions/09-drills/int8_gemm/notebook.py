# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: INT8 matrix multiply with requantization
#
# **You will learn** to multiply int8 matrices exactly, as integer Tensor Cores do, and to bring the
# int32 result back to int8 codes: the two steps of every integer-only linear layer (Jacob et al.,
# CVPR 2018, sec. 2.2), with the edges an interviewer probes: overflow, ties, saturation, and
# scales that belong to rows or to columns.
#
# **The conventions, all of them:**
# - `int8_matmul(a, b)` takes `a` int8 of shape `(M, K)` and `b` int8 of shape `(K, N)` and returns
#   `a @ b` **exactly**, as an **int32** array of shape `(M, N)`. $K$ is at most 131071, so every sum
#   fits int32 (a product is at most $128 \cdot 128 = 2^{14}$ in size); it is not checked.
# - `requantize(acc, a_scale, b_scale, out_scale, out_zero_point)` takes `acc` int32 `(M, N)`,
#   `a_scale` float32 of shape `(M, 1)` (one per row, a token) or a scalar, `b_scale` float32 of
#   shape `(1, N)` (one per column, an output channel) or a scalar, `out_scale` a float32 scalar and
#   `out_zero_point` an int in [-128, 127]. It returns the **int8** array
#   `clamp(round(acc * (a_scale * b_scale) / out_scale) + out_zero_point, -128, 127)`, computed in
#   **float64** in that order; `round` is **half to even** (2.5 -> 2, -2.5 -> -2, 3.5 -> 4, as
#   `np.round`); the zero point is added **after** rounding; the clamp saturates (never wraps).
# - `M`, `N`, `K` are at least 1. Results are compared exactly, with their dtype.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/int8_gemm", globals())

# %% tags=["solution"]
def int8_matmul(a, b) -> np.ndarray:
    """a @ b for int8 a (M, K) and b (K, N), exactly, as int32."""
    ### BEGIN SOLUTION
    return np.asarray(a).astype(np.int32) @ np.asarray(b).astype(np.int32)
    ### END SOLUTION


def requantize(acc, a_scale, b_scale, out_scale, out_zero_point) -> np.ndarray:
    """int8 codes clamp(round_half_even(acc * (a_scale * b_scale) / out_scale) + out_zero_point, -128, 127)."""
    ### BEGIN SOLUTION
    scale = np.asarray(a_scale, np.float64) * np.asarray(b_scale, np.float64)
    codes = np.round(np.asarray(acc, np.float64) * scale / np.float64(out_scale)) + out_zero_point
    return np.clip(codes, -128, 127).astype(np.int8)
    ### END SOLUTION


# %%
a = np.array([[127, -128], [1, 2]], dtype=np.int8)
b = np.array([[127, 0, 1], [-128, 1, 1]], dtype=np.int8)
acc = int8_matmul(a, b)
print(acc, acc.dtype)  # 127*127 + 128*128 = 32513
print(requantize(acc, np.array([[0.01], [0.5]], np.float32), np.array([[1, 1, 1]], np.float32), np.float32(2), 0))

# %% tags=["check"]
check("int8_matmul")
### BEGIN HIDDEN TESTS
check("int8_matmul", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("requantize")
### BEGIN HIDDEN TESTS
check("requantize", hidden=True)
### END HIDDEN TESTS
