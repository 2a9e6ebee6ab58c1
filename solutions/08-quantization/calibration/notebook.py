# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: calibrating activation ranges: min-max, percentile, KL and MSE
#
# **You will learn** to choose the clipping threshold `t` of a symmetric int8 quantizer from samples of a layer's
# activations, four ways: the largest magnitude (min-max), a percentile, the threshold whose quantized distribution
# loses the least information in KL divergence (TensorRT's entropy calibration: Migacz 2017, "8-bit Inference with
# TensorRT", GTC), and the one with the least mean squared error (Nagel et al. 2021, arXiv 2106.08295, section 3.1).
# On heavy-tailed activations a few outliers set `max|x|`; clipping them buys a finer step for everything else.
#
# **The conventions, all of them** (they are `aisys.quant.calibration`'s, which the checks compare with):
# - Values are clipped to `[-t, t]` and quantized with scale `t / qmax`, `qmax = 2**(bits-1) - 1` (127 for int8).
# - The histogram methods read a histogram of `|x|` as NVIDIA's tools collect it: `counts` (int64, `n` bins) and
#   `edges` (float64, `n + 1` of them), `n` equal bins over `[0, max|x|]`, so `edges[k] = k * max|x| / n` and the
#   largest magnitude falls in the last bin (TensorRT uses `n = 2048`). Where **all the data are 0**, the histogram
#   is `counts = [N, 0, ...]` with every edge 0, and every method returns `0.0`.
# - **`max_threshold(x)`**: `max|x|` as a float (`x` is a float array of any shape).
# - **`percentile_threshold(counts, edges, percentile)`**: with `below[k]` = the counts of bins `0..k-1` (the samples
#   below `edges[k]`; `below[0] = 0`), return `edges[k]` for the **smallest** `k` with
#   `100 * below[k] >= percentile * below[n]`, computed in float64 exactly so: the upper edge of the bin where the
#   cumulative count reaches `percentile` percent. So `percentile = 100` returns `edges[n] = max|x|`.
#   `0 < percentile <= 100`. (NVIDIA's pytorch-quantization returns that bin's lower edge, one bin less.)
# - **`kl_threshold(counts, edges, bits=8, unsigned=False, start_bin=128)`**, exactly as pytorch-quantization's
#   `_compute_amax_entropy` does it (`calib/histogram.py`):
#   0. work on a copy of `counts` in which `counts[0]` is replaced by `counts[1]` (the first bin holds every exact 0,
#      a ReLU's output, which would otherwise dominate);
#   1. for each candidate `i = start_bin, start_bin + 1, ..., n` (**n included**), threshold `edges[i]`:
#   2. the reference `P` is `counts[:i]` (as float64) with the outliers `sum(counts[i:])` **added to its last bin**
#      `P[i-1]`;
#   3. the candidate `Q`: with `levels = 2**(bits-1)` (128 for int8; `2**bits` = 256 if `unsigned`), bin
#      `j < i` belongs to group `(j * levels) // i`; each group's total of `counts[:i]` (the outliers **not**
#      included) is spread evenly over the group's **non-empty** bins (`counts[j] > 0`), and empty bins get 0
#      (no smoothing);
#   4. `KL(P || Q) = sum(p[j] * ln(p[j] / q[j]))` over the `j` with `p[j] > 0`, after **normalizing** both:
#      `p = P / sum(P)`, `q = Q / sum(Q)`; it is `+inf` where some `p[j] > 0` has `q[j] = 0` (only bin `i - 1` can:
#      empty, but holding folded outliers), and `+inf` where `Q` is all 0 (no counts below the candidate at all);
#   5. the candidate with the smallest KL wins, the **largest** `i` among exact ties; return `edges[i]`.
#
#   `1 <= start_bin <= n`. (Migacz's slides return `(i + 0.5)` bin widths, half a bin more.)
# - **`mse_threshold(x, candidates, bits=8)`**: the candidate `t` (all > 0) minimising
#   `np.mean((fake_quantize(x, t) - x) ** 2)` with `fake_quantize(x, t) = np.clip(np.round(x / s), -qmax, qmax) * s`,
#   `s = t / qmax`, in float64 and in exactly that order; the first among exact ties. Return it as a float.
# - Thresholds are compared exactly: each is one of the given edges or candidates, or `max|x|`.
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers cannot.

# %%
import numpy as np

from aisys_grader import checker

check = checker("08-quantization/calibration", globals())

# %% [markdown]
# Activations to try things on: Laplace (a heavy tail), Student-t with three degrees of freedom and a few
# outliers, and a ReLU's output (half exact zeros). `histogram` is the histogram above, provided.

# %%
def histogram(x, bins=2048):
    """(counts int64, edges float64) of |x| in `bins` equal bins over [0, max|x|]."""
    x = np.abs(np.asarray(x, dtype=np.float64)).ravel()
    if x.max() == 0:
        counts = np.zeros(bins, np.int64)
        counts[0] = x.size
        return counts, np.zeros(bins + 1)
    counts, edges = np.histogram(x, bins=bins, range=(0.0, float(x.max())))
    return counts.astype(np.int64), edges


demo = np.random.default_rng(0)
activations = {"laplace": demo.laplace(size=10_000), "student-t, 3": demo.standard_t(3, 10_000),
               "relu": np.maximum(demo.standard_normal(10_000), 0)}
activations["student-t, 3"][:10] *= 20  # a few outliers

# %% [markdown]
# ## 1. Min-max and percentile

# %% tags=["solution"]
def max_threshold(x):
    """max|x|."""
    ### BEGIN SOLUTION
    return float(np.abs(np.asarray(x, dtype=np.float64)).max())
    ### END SOLUTION


def percentile_threshold(counts, edges, percentile):
    """edges[k] for the smallest k with 100 * (counts below edges[k]) >= percentile * (all counts)."""
    ### BEGIN SOLUTION
    below = np.concatenate([[0], np.cumsum(counts)])
    k = int(np.argmax(100.0 * below >= percentile * below[-1]))
    return float(edges[k])
    ### END SOLUTION


# %% tags=["check"]
check("max_threshold")
### BEGIN HIDDEN TESTS
check("max_threshold", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("percentile_threshold")
### BEGIN HIDDEN TESTS
check("percentile_threshold", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. KL divergence, as TensorRT calibrates
#
# Write the divergence of one candidate first; `kl_threshold` tries them all. Vectorize each candidate (`np.bincount`
# sums a group's counts): 1,921 candidates of a 2048-bin histogram then take well under a second.

# %% tags=["solution"]
def candidate_divergence(counts, i, levels):
    """KL(P || Q) of candidate i, for counts whose first bin was already replaced (steps 2-4)."""
    ### BEGIN SOLUTION
    kept = counts[:i].astype(np.float64)
    reference = kept.copy()
    reference[-1] += counts[i:].sum()  # the outliers, folded into the last bin
    group = (np.arange(i) * levels) // i
    filled = kept > 0
    total = np.bincount(group, weights=kept, minlength=levels)
    nonempty = np.bincount(group, weights=filled, minlength=levels)
    candidate = np.where(filled, total[group] / np.maximum(nonempty[group], 1), 0.0)
    if candidate.sum() == 0:  # no counts below the candidate: nothing to compare with
        return np.inf
    p, q = reference / reference.sum(), candidate / candidate.sum()
    mass = p > 0
    if (q[mass] == 0).any():
        return np.inf
    return float(np.sum(p[mass] * np.log(p[mass] / q[mass])))
    ### END SOLUTION


def kl_threshold(counts, edges, bits=8, unsigned=False, start_bin=128):
    """edges[i] of the candidate i in [start_bin, n] with the smallest KL(P || Q); the largest i among ties."""
    ### BEGIN SOLUTION
    if edges[-1] == 0:
        return 0.0
    counts = np.array(counts, dtype=np.int64)
    counts[0] = counts[1]
    levels = 2 ** (bits - 1 + int(unsigned))
    divergences = [candidate_divergence(counts, i, levels) for i in range(start_bin, len(counts) + 1)]
    best = max(range(len(divergences)), key=lambda k: (-divergences[k], k))  # the smallest, the last of ties
    return float(edges[start_bin + best])
    ### END SOLUTION


# %% tags=["check"]
check("kl_threshold")
### BEGIN HIDDEN TESTS
check("kl_threshold", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Mean squared error

# %% tags=["solution"]
def mse_threshold(x, candidates, bits=8):
    """The candidate t with the smallest mean((fake_quantize(x, t) - x) ** 2); the first among ties."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float64)
    qmax = 2 ** (bits - 1) - 1
    errors = []
    for t in np.asarray(candidates, dtype=np.float64):
        s = t / qmax
        errors.append(np.mean((np.clip(np.round(x / s), -qmax, qmax) * s - x) ** 2))
    return float(np.asarray(candidates, dtype=np.float64)[int(np.argmin(errors))])
    ### END SOLUTION


# %% tags=["check"]
check("mse_threshold")
### BEGIN HIDDEN TESTS
check("mse_threshold", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Try it: what each method picks
#
# As a fraction of `max|x|`: on heavy tails KL and the percentile clip far below the largest magnitude.

# %%
for name, x in activations.items():
    counts, edges = histogram(x, 512)  # 512 bins keep this quick; TensorRT uses 2048
    picks = {"max": max_threshold(x), "99.99%": percentile_threshold(counts, edges, 99.99),
             "KL": kl_threshold(counts, edges), "MSE": mse_threshold(x, edges[128::4])}
    print(f"{name:13s}", "  ".join(f"{k} {v / picks['max']:.3f}" for k, v in picks.items()))
