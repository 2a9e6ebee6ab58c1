# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: {title}
#
# **You will learn** what the student can do after this exercise, in one or two sentences, and why
# it matters on real hardware (cite the primary source: paper section, datasheet table).
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers cannot.

# %%
import numpy as np

from aisys_grader import checker

check = checker("{exercise}", globals())

# %% [markdown]
# ## 1. Scale a vector
#
# `scale(x, factor)` returns `factor * x` as a float64 array of the same shape as `x`.

# %% tags=["solution"]
def scale(x, factor: float) -> np.ndarray:
    """factor * x, in float64."""
    ### BEGIN SOLUTION
    return np.asarray(x, dtype=np.float64) * factor
    ### END SOLUTION


# %% tags=["check"]
check("scales")
### BEGIN HIDDEN TESTS
check("scales", hidden=True)
### END HIDDEN TESTS
