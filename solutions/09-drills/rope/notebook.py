# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: rotary position embedding
#
# **You will learn** to apply rotary position embeddings (RoPE; Su et al. 2021, "RoFormer", section 3.4)
# in both of the layouts real models use, and to tell them apart. RoPE rotates each pair of features
# of a query or key by an angle proportional to the token's position, so that a query-key dot product
# depends only on how far apart the two tokens are; every Llama-style model applies it before attention.
#
# **The conventions, all of them:**
# - `rope(x, positions, style)` takes `x` of shape `(seq, heads, head_dim)` (float64, `head_dim` even),
#   `positions` an int64 array of shape `(seq,)` (token `t` sits at position `positions[t]`: any integers
#   >= 0, in any order, repeats allowed, not necessarily `0 .. seq-1`), and `style`, `"interleaved"` or
#   `"half"`; it returns a new float64 array of `x`'s shape and leaves `x` unchanged;
# - with `d = head_dim`, pair `i` (for `i = 0 .. d/2 - 1`) has the frequency
#   $\theta_i = \text{base}^{-2i/d}$ with `base = 10000`, and at position $p$ it rotates by the angle $p\,\theta_i$:
#   $$a' = a\cos(p\theta_i) - b\sin(p\theta_i), \qquad b' = a\sin(p\theta_i) + b\cos(p\theta_i),$$
#   where $(a, b)$ are the pair's two features;
# - `style="interleaved"` pairs features `(2i, 2i + 1)`: the RoFormer paper, GPT-J, Meta's Llama code;
# - `style="half"` pairs features `(i, i + d/2)`: GPT-NeoX and Hugging Face's Llama (`rotate_half`);
# - every head at a token gets the same rotation; position 0 leaves a token unchanged; `seq` may be 0;
# - compute in float64; results are compared with a relative and an absolute tolerance of 1e-9.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/rope", globals())

# %% tags=["solution"]
def rope(x, positions, style) -> np.ndarray:
    """x (seq, heads, head_dim) rotated pair by pair by positions[t] * 10000^(-2i/head_dim), in float64."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    i = np.arange(d // 2)
    first, second = (2 * i, 2 * i + 1) if style == "interleaved" else (i, i + d // 2)
    theta = 10000.0 ** (-2 * i / d)  # (d/2,)
    angle = np.asarray(positions, dtype=np.float64)[:, None] * theta  # (seq, d/2)
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]  # the same for every head
    a, b = x[..., first], x[..., second]
    out = np.empty_like(x)
    out[..., first] = a * cos - b * sin
    out[..., second] = a * sin + b * cos
    return out
    ### END SOLUTION


# %% tags=["check"]
check("rope")
### BEGIN HIDDEN TESTS
check("rope", hidden=True)
### END HIDDEN TESTS
