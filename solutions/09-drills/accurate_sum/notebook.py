# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: an accurate float32 sum
#
# **You will learn** to sum many float32 numbers in float32 without losing the small ones: a running
# float32 sum rounds at every addition, and once it is large each small term loses its low bits
# ($2^{24} + 1$ is $2^{24}$ in float32, so $2^{24}$ followed by a million ones sums to $2^{24}$). Kahan's
# compensated summation keeps what each addition dropped and adds it back; pairwise summation keeps
# the partial sums of similar size. The same loss happens in a GPU kernel's float32 (or bf16)
# accumulator, where float64 is slow or absent.
#
# **The conventions, all of them:**
# - `accurate_sum(x)` takes a 1-D numpy `float32` array of $n \ge 0$ finite numbers ($n$ up to
#   $10^5$; every partial sum, in any order, is far from float32's overflow) and returns
#   their sum as a **float32 value**: a `np.float32`, or a Python float that float32 holds exactly
#   (the checks verify it);
# - accuracy: with $S$ the exact sum of the $x_i$ (as real numbers) and $\varepsilon = 2^{-23}$
#   (`np.finfo(np.float32).eps`), the result $s$ must satisfy
#   $|s - S| \le 2\,\varepsilon \sum_i |x_i|$: 2 to 4 units in the last place of a sum of
#   positive numbers. The checks compute $S$ with `math.fsum` on the values in float64;
# - the sum of an empty array is 0 (the bound is then 0: exactly 0);
# - add in **float32 only**: no float64 (no `astype(np.float64)`, no `math.fsum`, no arithmetic on
#   Python floats, which are float64). The checks cannot see how you add, so a float64 accumulator
#   would pass them: it is the drill, not the grader, that forbids it. `np.sum` of float32 is
#   pairwise only across blocks of 128 elements, each summed in 8 running sums: it fails the bound.
#
# The hidden cases probe one element, zeros, cancellation ($10^8 + 1 - 10^8$), a huge first term
# followed by tens of thousands of ones (and the ones first, or a huge term at each end), positive
# random data of $10^5$ elements, and small arrays drawn at random (the smallest failing one is shown).

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/accurate_sum", globals())

# %% tags=["solution"]
def accurate_sum(x) -> np.float32:
    """The sum of the float32 vector x, added in float32, within 2 * eps32 * sum|x| of the exact sum."""
    ### BEGIN SOLUTION
    total, compensation = np.float32(0), np.float32(0)
    for value in np.asarray(x, dtype=np.float32):  # Kahan: keep what each addition drops
        y = value - compensation
        t = total + y
        compensation = (t - total) - y
        total = t
    return total
    ### END SOLUTION


# %% [markdown]
# $2^{24}$ then $10^5$ ones: the exact sum is 16 877 216. A running float32 sum (`np.cumsum`) stays at
# $2^{24}$:

# %%
example = np.concatenate([[2.0**24], np.ones(100_000)]).astype(np.float32)
print(accurate_sum(example), np.cumsum(example, dtype=np.float32)[-1])

# %% tags=["check"]
check("accurate_sum")
### BEGIN HIDDEN TESTS
check("accurate_sum", hidden=True)
### END HIDDEN TESTS
