# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: grouped-query attention with a causal mask
#
# **You will learn** to write scaled dot-product attention (Vaswani et al. 2017, section 3.2.1) with
# the two things every modern decoder adds: grouped-query attention, where several query heads share
# one key/value head (Ainslie et al. 2023; Llama 2 70B, Llama 3, Mistral), and a causal mask that still
# holds when there are fewer queries than keys, as in a decode step over a KV cache.
#
# **The conventions, all of them:**
# - `attention(q, k, v, causal)` takes `q` of shape `(B, Hq, T, d)` and `k`, `v` of shape `(B, Hkv, S, d)`
#   (batch, heads, tokens, head size: torch's layout), float32, and `causal` a bool; they arrive as
#   numpy arrays: turn them into tensors with `torch.as_tensor`. Return the `(B, Hq, T, d)` result as a
#   float32 `torch.Tensor` (a float32 numpy array is accepted too);
# - `B >= 1`, `T >= 1`, `S >= 1`, and `Hq` is a multiple of `Hkv`: query head `h` uses key/value head
#   `h // (Hq // Hkv)`, so heads `0 .. Hq/Hkv - 1` share kv head 0 (what `repeat_interleave` on the heads
#   axis gives). `Hkv == Hq` is ordinary multi-head attention, `Hkv == 1` multi-query attention;
# - scores are `q k^T / sqrt(d)`, the softmax runs over the `S` keys, and the result is the weights times `v`;
# - `causal=True`: the `T` queries are the **last** `T` of the `S` positions, so query `i` sees keys
#   `j <= i + S - T`. With `T == S` that is the usual lower triangle; with `T == 1` (decoding with a KV
#   cache) the one query sees every key. Note: `torch.nn.functional.scaled_dot_product_attention(...,
#   is_causal=True)` aligns its mask to the start (query `i` sees `j <= i`), which differs when `T < S`.
#   When `causal` is true the checks never pass `T > S`;
# - `causal=False`: every query sees every key (`T > S` allowed);
# - results are compared with a relative and an absolute tolerance of 1e-5; scores may be large (tens):
#   the softmax must not overflow.

# %%
import math

import torch

from aisys_grader import checker

check = checker("09-drills/attention", globals())

# %% tags=["solution"]
def attention(q, k, v, causal):
    """softmax(q k^T / sqrt(d)) v with grouped-query heads and an end-aligned causal mask: (B, Hq, T, d) float32."""
    ### BEGIN SOLUTION
    q, k, v = (torch.as_tensor(x, dtype=torch.float32) for x in (q, k, v))
    t, s, d = q.shape[2], k.shape[2], q.shape[3]
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # head h of q meets kv head h // group
    v = v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, Hq, T, S)
    if causal:
        i, j = torch.arange(t)[:, None], torch.arange(s)[None, :]
        scores = scores.masked_fill(j > i + s - t, float("-inf"))  # query i sits at position i + S - T
    return torch.softmax(scores, dim=-1) @ v
    ### END SOLUTION


# %% tags=["check"]
check("attention")
### BEGIN HIDDEN TESTS
check("attention", hidden=True)
### END HIDDEN TESTS
