# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: pack 4-bit codes into int32 words
#
# **You will learn** to pack and unpack 4-bit weights as GPTQ and AWQ checkpoints store them, eight codes in
# one int32 word, in both nibble orders (Frantar et al. 2022, GPTQ, section 5; Lin et al. 2023, AWQ; AutoAWQ's
# `awq/modules/linear/gemm.py`): the bit arithmetic under every W4A16 kernel, and the sign-bit trap in it.
#
# **The conventions, all of them:**
# - `pack(q, order)` takes codes `q`, a 2-D int64 array (N, K) with every value in [0, 15] and K a positive
#   multiple of 8 (N may be 0), and returns the words, a 2-D array (N, K // 8) of dtype **int32**: word `w` of
#   row `n` holds the codes `q[n, 8w : 8w + 8]`.
# - `order="sequential"` (GPTQ): element `j` of the eight sits at bits `4j .. 4j + 3` (element 0 in the lowest
#   bits). `order="awq"`: the nibble at bits `4i` holds element `[0, 2, 4, 6, 1, 3, 5, 7][i]`, so element `j`
#   sits at nibble `j // 2 + 4 * (j % 2)`.
# - A code >= 8 in the top nibble (bits 28..31) sets the sign bit: the word is a **negative** int32, as its bits
#   read in two's complement (eight codes 15 make -1). It must wrap to that, never overflow or saturate.
# - `unpack(words, order)` takes int32 words (N, W), any values, and returns the codes (N, 8 W) of dtype
#   **uint8**, each in [0, 15]: the inverse of `pack`. An int32 shifted right is shifted arithmetically (it
#   fills with copies of the sign bit).
# - Both are compared exactly, values and dtype.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/int4_pack", globals())

# %% tags=["solution"]
def pack(q, order="sequential"):
    """Codes (N, K) in [0, 15] to int32 words (N, K // 8), 8 codes per word, in `order`."""
    ### BEGIN SOLUTION
    position = np.array([j // 2 + 4 * (j % 2) for j in range(8)]) if order == "awq" else np.arange(8)
    q = np.asarray(q).astype(np.uint32)
    q = q.reshape(q.shape[0], q.shape[1] // 8, 8)
    words = np.zeros(q.shape[:2], dtype=np.uint32)
    for j in range(8):
        words |= q[:, :, j] << np.uint32(4 * position[j])
    return words.view(np.int32)
    ### END SOLUTION


def unpack(words, order="sequential"):
    """int32 words (N, W) to codes (N, 8 W) uint8, in `order`."""
    ### BEGIN SOLUTION
    position = np.array([j // 2 + 4 * (j % 2) for j in range(8)]) if order == "awq" else np.arange(8)
    words = np.asarray(words, dtype=np.int32)
    codes = (words[:, :, None] >> (4 * position)) & 0xF  # mask after the shift: it is arithmetic
    return codes.reshape(words.shape[0], 8 * words.shape[1]).astype(np.uint8)
    ### END SOLUTION


# %%
q = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 15]])
for order in ("sequential", "awq"):
    print(order, [f"{int(w) & 0xFFFFFFFF:#010x}" for w in pack(q, order)[0]], unpack(pack(q, order), order)[0])

# %% tags=["check"]
check("pack")
### BEGIN HIDDEN TESTS
check("pack", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("unpack")
### BEGIN HIDDEN TESTS
check("unpack", hidden=True)
### END HIDDEN TESTS
