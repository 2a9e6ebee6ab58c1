# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: one decode step with a KV cache
#
# **You will learn** to write the step an inference engine repeats for every generated token: append
# the new token's key and value to the cache, then let its query attend over every cached position,
# itself included. The cache is why decoding costs one token's work per step instead of re-running the
# whole prefix (chapter 7, "The KV cache"); getting its bookkeeping right (the order of append and attend,
# the axis, the length) is what this drill is about.
#
# **The conventions, all of them:**
# - `decode_step(k_cache, v_cache, q, k, v)`: `k_cache` and `v_cache` have shape `(heads, t, d)` (one
#   layer; `t` tokens cached so far, **`t` may be 0**), and `q`, `k`, `v` have shape `(heads, d)`: the new
#   token's query, key and value; all float64, the same number of heads for queries and keys (no grouping);
# - first append: the new caches have shape `(heads, t + 1, d)`, the old entries first, the new token's
#   `k` (`v`) last, at index `t`;
# - then attend: for each head `h`, the scores are `k_cache_new[h] @ q[h] / sqrt(d)` over all `t + 1`
#   positions (no mask: the new token is the last, so it may see them all), the weights their softmax,
#   and the output the weights times `v_cache_new[h]`;
# - return the tuple `(out, k_cache_new, v_cache_new)`: `out` of shape `(heads, d)`, all three float64;
#   the arguments are left unchanged (return new arrays);
# - scores may be large (hundreds): the softmax must not overflow;
# - results are compared with a relative and an absolute tolerance of 1e-9.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/kv_cache_decode", globals())

# %% tags=["solution"]
def decode_step(k_cache, v_cache, q, k, v):
    """Append k, v (heads, d) to the caches (heads, t, d), then attend with q over all t + 1 positions:
    (out (heads, d), k_cache (heads, t + 1, d), v_cache (heads, t + 1, d)), float64."""
    ### BEGIN SOLUTION
    k_all = np.concatenate([k_cache, k[:, None, :]], axis=1)  # (heads, t + 1, d): the new token last
    v_all = np.concatenate([v_cache, v[:, None, :]], axis=1)
    scores = np.einsum("hd,htd->ht", q, k_all) / np.sqrt(q.shape[-1])  # (heads, t + 1)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    out = np.einsum("ht,htd->hd", weights, v_all)
    return out, k_all, v_all
    ### END SOLUTION


# %% tags=["check"]
check("decode_step")
### BEGIN HIDDEN TESTS
check("decode_step", hidden=True)
### END HIDDEN TESTS
