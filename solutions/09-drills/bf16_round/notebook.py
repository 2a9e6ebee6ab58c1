# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: round float32 to bf16 on the bits
#
# **You will learn** to convert float32 to BF16 the way kernels and libraries do it, with integer operations on the
# bit pattern: round to nearest, ties to even, in one addition and one shift, with NaN kept apart. BF16 is the top
# half of a float32 (1 sign, 8 exponent, 7 fraction bits; Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep
# Learning Training"), so converting is rounding a 32-bit integer to a multiple of 2^16.
#
# **The conventions, all of them:**
# - `to_bf16_bits(x)` takes a float32 array `x` (any shape, possibly empty) and returns the **uint16** array of
#   the same shape holding the BF16 bit patterns (the top 16 bits of the rounded float32 pattern).
# - Rounding: to nearest, **ties to even** (IEEE 754-2019 roundTiesToEven): a value exactly halfway between two
#   BF16 values goes to the one whose last kept bit is 0. Rounding the largest fraction up carries into the
#   exponent (`0x3F7FFFFF`, just below 1, gives 1.0, `0x3F80`); beyond the largest BF16 value the result is
#   **inf** (`0x7F80`, with the sign): no saturation. inf stays inf; -0 stays -0 (`0x8000`); float32 subnormals
#   round to BF16 subnormals or to zero of their sign.
# - **NaN** (any float32 NaN, whatever its payload or sign) gives the quiet NaN `0x7FC0` with the input's sign
#   bit (`0xFFC0` for a negative NaN): what `ml_dtypes` and torch produce. It must never become inf.
# - `bf16_to_float32(codes)` takes a uint16 array of BF16 patterns and returns the **float32** array of their
#   values (exact: every BF16 value is a float32). A NaN pattern gives a NaN (its payload is not checked).
# - Both must work on whole arrays: no Python loop over elements. The checks compare bit patterns exactly; `np.float32`
#   arithmetic on values is not needed.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/bf16_round", globals())

# %% tags=["solution"]
def to_bf16_bits(x) -> np.ndarray:
    """uint16 BF16 patterns of float32 x: round to nearest even on the bits; NaN -> 0x7FC0 with its sign."""
    ### BEGIN SOLUTION
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    quiet = ((bits >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7FC0)
    return np.where(nan, quiet, rounded).astype(np.uint16)
    ### END SOLUTION


def bf16_to_float32(codes) -> np.ndarray:
    """float32 values of uint16 BF16 patterns: the pattern is the top half of the float32's."""
    ### BEGIN SOLUTION
    return (np.asarray(codes, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    ### END SOLUTION


# %% tags=["check"]
check("rounds_to_nearest_even")
### BEGIN HIDDEN TESTS
check("rounds_to_nearest_even", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("specials")
### BEGIN HIDDEN TESTS
check("specials", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("widens")
### BEGIN HIDDEN TESTS
check("widens", hidden=True)
### END HIDDEN TESTS
