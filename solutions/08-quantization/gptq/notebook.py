# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: GPTQ on one layer
#
# **You will learn** how GPTQ (Frantar et al., arXiv 2210.17323, sec. 3-4) quantizes a linear layer's weight one
# column at a time and feeds each column's rounding error into the columns not yet quantized, weighted by the inverse
# Hessian $H^{-1}$ of the layer's output error on calibration inputs; why it factors $H^{-1}$ by Cholesky, damps $H$,
# and updates lazily in blocks without changing the result; and why it beats round-to-nearest where inputs are
# correlated.
#
# A linear layer computes $y = x W^\top$ with $W$ of shape $(d_{row}, d_{col})$ (as `torch.nn.Linear`). Quantizing
# $W$ to $Q$ changes the outputs on the calibration inputs $X$ ($n \times d_{col}$) by $X (W - Q)^\top$; GPTQ makes
# $\mathrm{tr}((W - Q) H (W - Q)^\top)$ small, with $H = 2 X^\top X / n$. Everything follows the authors' code
# (github.com/IST-DASLab/gptq, `gptq.py`: `GPTQ.add_batch`, `GPTQ.fasterquant`; `quant.py`: `Quantizer`), and these
# conventions, all of which the checks rely on:
#
# - **dtypes**: compute in **float64** (inputs may be float32: convert them); `hessian` and
#   `hessian_inverse_factor` return float64, `gptq` returns the dequantized weight in **float32**.
# - **the quantizer** (given below, use it as is): per row, asymmetric min-max over a group of columns:
#   `minmax_params` and `fake_quant`. Codes are in $[-2^{b-1}, 2^{b-1}-1]$, the range $[\min(w_{min}, 0),
#   \max(w_{max}, 0)]$, the scale rounded to float32, rounding half to even. A column's error is taken against
#   `fake_quant`'s **float32** value.
# - **dead columns**: where $H_{ii} = 0$ (feature $i$ is 0 on every calibration input) set $H_{ii} = 1$ and
#   $W_{:,i} = 0$, **before** anything else.
# - **act_order**: with `act_order=True` the columns are quantized in order of decreasing $H_{ii}$ (after the dead
#   columns' $H_{ii} = 1$), `np.argsort(-np.diag(H), kind="stable")`, $W$'s columns and $H$'s rows and columns
#   permuted alike; the result is returned in the layer's **own** column order.
# - **dampening**: add `percdamp * mean(diag(H))` (after the dead columns' fix) to $H$'s diagonal.
# - **groups**: `group_size=None` is one group per row (all columns). Otherwise a group is `group_size` consecutive
#   columns **in the order of quantization** (the permuted order with act_order; the last group may be shorter).
#   A group's parameters are chosen when its first column is about to be quantized, from the group's **current**
#   weights: the ones updated by every column quantized before (GPTQ's `static_groups=False`).
# - **blocks**: `block_size` is the lazy update's block; any value gives the same result, up to rounding.
#
# When your work is graded, no `aisys` module can be imported (the reference, `aisys.quant.gptq`, cannot).

# %%
import numpy as np

from aisys_grader import checker

check = checker("08-quantization/gptq", globals())


def minmax_params(w, bits):
    """Per-row asymmetric min-max parameters of w (d_row, k): (scale float32 (d_row,), zero_point int32 (d_row,))."""
    qmin, qmax = -2 ** (bits - 1), 2 ** (bits - 1) - 1
    low = np.minimum(w.min(axis=1), 0.0)
    high = np.maximum(w.max(axis=1), 0.0)
    scale = np.maximum(((high - low) / (qmax - qmin)).astype(np.float32), np.finfo(np.float32).tiny)
    zero_point = np.clip(qmin - np.round(low / scale.astype(np.float64)), qmin, qmax).astype(np.int32)
    return scale, zero_point


def fake_quant(w, scale, zero_point, bits):
    """w (d_row,) rounded to the grid of each row and back: float32 (clamp(round(w / scale) + zp) - zp) * scale."""
    qmin, qmax = -2 ** (bits - 1), 2 ** (bits - 1) - 1
    codes = np.clip(np.round(w / scale.astype(np.float64)) + zero_point, qmin, qmax).astype(np.int8)
    return (codes.astype(np.int32) - zero_point).astype(np.float32) * scale


def round_to_nearest(weight, bits, group_size=None):
    """The baseline: every column rounded with parameters from the weight itself, no error feedback (float32)."""
    weight = np.asarray(weight, np.float64)
    group = group_size or weight.shape[1]
    out = np.empty(weight.shape, np.float32)
    for start in range(0, weight.shape[1], group):
        scale, zero_point = minmax_params(weight[:, start:start + group], bits)
        for j in range(start, min(start + group, weight.shape[1])):
            out[:, j] = fake_quant(weight[:, j], scale, zero_point, bits)
    return out


def hessian_error(weight, quantized, H):
    """tr((W - Q) H (W - Q)^T): the layer's output error on the calibration inputs (times 2 / n)."""
    delta = np.asarray(weight, np.float64) - np.asarray(quantized, np.float64)
    return float(np.einsum("ij,jk,ik->", delta, H, delta))


# %% [markdown]
# ## 1. The Hessian from calibration batches
#
# `hessian(batches)`: `batches` is a list of arrays, each `(rows, d_col)` or `(..., d_col)` (leading axes are
# flattened to rows: one row per token). Return $H = \frac{2}{n} X^\top X$ (float64, $d_{col} \times d_{col}$) where
# $X$ stacks the rows of **all** batches and $n$ is their total number of rows. The original accumulates it as the
# batches come (`add_batch`: $H \leftarrow \frac{n}{n+m} H + \frac{2}{n+m} x^\top x$); either way, the batches
# have different numbers of rows, so averaging each batch's own Hessian is not the same.
#
# (`add_batch` counts `inp.shape[0]`, sequences rather than tokens, in $n$: a constant factor, which changes
# nothing in GPTQ's result, since the dampening is relative and the updates use ratios of $H^{-1}$'s entries.)

# %% tags=["solution"]
def hessian(batches):
    """H = 2 X^T X / n over the rows of every batch (float64)."""
    ### BEGIN SOLUTION
    rows = [np.asarray(b, np.float64).reshape(-1, np.shape(b)[-1]) for b in batches]
    X = np.concatenate(rows, axis=0)
    return 2.0 * X.T @ X / len(X)
    ### END SOLUTION


# %% tags=["check"]
check("hessian")
### BEGIN HIDDEN TESTS
check("hessian", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. The factor of the inverse Hessian
#
# Quantizing column $q$ to $\mathrm{quant}(w_q)$ and letting the other free columns absorb the error, the Optimal
# Brain Surgeon update (Hassibi & Stork 1993) moves them by
# $\delta = -\frac{w_q - \mathrm{quant}(w_q)}{[H^{-1}]_{qq}} (H^{-1})_{:,q}$, with $H^{-1}$ the inverse Hessian of
# the columns **not yet quantized**: after each step, $q$'s row and column must be eliminated from $H^{-1}$. GPTQ
# quantizes the columns in a fixed order, so every $H^{-1}$ it will ever need is known in advance: the rows of the
# upper Cholesky factor $U$ of $H^{-1}$ ($H^{-1} = U^\top U$) hold exactly them (row $j$ of $U$ is row $j$ of the
# inverse with columns $0..j-1$ eliminated, divided by the square root of its diagonal), and they are computed once,
# stably (sec. 4, step 3).
#
# `hessian_inverse_factor(H, percdamp)`: copy $H$; set $H_{ii} = 1$ where $H_{ii} = 0$; add `percdamp *
# mean(diag(H))` to the diagonal; return the **upper** triangular $U$ with $U^\top U = H^{-1}$ (float64).
# `np.linalg.cholesky` gives the lower factor $L$ of a matrix ($A = L L^\top$): the upper factor of $A$ is $L^\top$.
# Without the dampening, $H$ is singular whenever the calibration set has fewer rows than features (or collinear
# ones), and the Cholesky factorization fails.

# %% tags=["solution"]
def hessian_inverse_factor(H, percdamp=0.01):
    """U upper triangular with U^T U = (H + damp I)^-1, dead columns' H_ii set to 1 first (float64)."""
    ### BEGIN SOLUTION
    H = np.array(H, dtype=np.float64)
    dead = np.diag(H) == 0
    H[dead, dead] = 1.0
    H[np.diag_indices_from(H)] += percdamp * np.mean(np.diag(H))
    L_inv = np.linalg.inv(np.linalg.cholesky(H))
    H_inv = L_inv.T @ L_inv
    return np.linalg.cholesky(H_inv).T
    ### END SOLUTION


# %% tags=["check"]
check("inverse_factor")
### BEGIN HIDDEN TESTS
check("inverse_factor", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. GPTQ
#
# `gptq(weight, H, bits, group_size=None, block_size=128, act_order=False, percdamp=0.01)` returns the quantized
# weight, dequantized, float32, shape of `weight`, in the layer's own column order. Steps:
#
# 1. $W$ = `weight` in float64 (a copy); dead columns: $H_{ii} = 1$, $W_{:,i} = 0$;
# 2. with `act_order`, permute $W$'s columns and $H$ by decreasing $H_{ii}$ (stable);
# 3. $U$ = `hessian_inverse_factor(H, percdamp)`;
# 4. for each block of columns $[i_1, i_2)$ of `block_size` (the last one shorter): copy it, $W_1$; for each column
#    $j$ of the block, in order:
#    - if $j$ starts a group (`j % group_size == 0`, or $j = 0$ without groups), choose the group's parameters
#      with `minmax_params` from its current weights: columns $j$ to $j + $ `group_size` $- 1$ **with every update
#      so far**, including those of the block's columns already quantized, which the columns after $i_2$ have not
#      received yet (subtract them: $W_{:, i_2:} - E_{:, :i} U_{i_1:j,\, i_2:}$);
#    - $q_j$ = `fake_quant`$(w_j)$, $e_j = (w_j - q_j) / U_{jj}$, and $W_1{}_{:, j:} \mathrel{-}= e_j U_{j,\, j:i_2}$
#      (the OBS update, one row of $U$);
#    - keep $e_j$ in the block's error matrix $E$ (rows $\times$ block);
# 5. after the block, update every later column at once: $W_{:, i_2:} \mathrel{-}= E\, U_{i_1:i_2,\, i_2:}$ (one
#    matrix product instead of one rank-1 update per column: the same sums in another order, sec. 4 step 2);
# 6. undo the permutation.
#
# Cost: $O(d_{row} d_{col}^2)$ for the updates, $O(d_{col}^3)$ for the factorizations.

# %% tags=["solution"]
def gptq(weight, H, bits, group_size=None, block_size=128, act_order=False, percdamp=0.01):
    """GPTQ: columns quantized in order, each error fed back through the inverse Hessian's Cholesky factor (float32)."""
    ### BEGIN SOLUTION
    W = np.array(weight, dtype=np.float64)
    H = np.array(H, dtype=np.float64)
    rows, cols = W.shape
    dead = np.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    order = np.argsort(-np.diag(H), kind="stable") if act_order else np.arange(cols)
    W, H = W[:, order], H[np.ix_(order, order)]
    U = hessian_inverse_factor(H, percdamp)
    group = group_size or cols
    Q = np.zeros((rows, cols), np.float32)
    for i1 in range(0, cols, block_size):
        i2 = min(i1 + block_size, cols)
        W1 = W[:, i1:i2].copy()
        E = np.zeros((rows, i2 - i1))
        for i in range(i2 - i1):
            j = i1 + i
            if j % group == 0:
                pending = W[:, i2:j + group] - E[:, :i] @ U[i1:j, i2:j + group]
                scale, zero_point = minmax_params(np.hstack([W1[:, i:j + group - i1], pending]), bits)
            Q[:, j] = fake_quant(W1[:, i], scale, zero_point, bits)
            E[:, i] = (W1[:, i] - Q[:, j]) / U[j, j]
            W1[:, i:] -= np.outer(E[:, i], U[j, j:i2])
        W[:, i2:] -= E @ U[i1:i2, i2:]
    return Q[:, np.argsort(order)]
    ### END SOLUTION


# %% [markdown]
# Inputs whose features are correlated (here, 4 hidden factors and a little noise): GPTQ's error against
# round-to-nearest's, and the same result for every block size.

# %%
_rng = np.random.default_rng(0)
_X = _rng.standard_normal((256, 4)) @ _rng.standard_normal((4, 32)) + 0.1 * _rng.standard_normal((256, 32))
_W, _H = _rng.standard_normal((16, 32)), hessian([_X])
for _bits in (2, 3, 4):
    print(f"{_bits} bits: GPTQ {hessian_error(_W, gptq(_W, _H, _bits), _H):.4g}, "
          f"round to nearest {hessian_error(_W, round_to_nearest(_W, _bits), _H):.4g}")
print("same for block sizes 1, 7, 128:",
      all(np.array_equal(gptq(_W, _H, 3, block_size=b), gptq(_W, _H, 3)) for b in (1, 7)))

# %% tags=["check"]
check("matches_reference")
### BEGIN HIDDEN TESTS
check("matches_reference", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("lazy_blocks")
### BEGIN HIDDEN TESTS
check("lazy_blocks", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("beats_round_to_nearest")
### BEGIN HIDDEN TESTS
check("beats_round_to_nearest", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("dead_columns")
### BEGIN HIDDEN TESTS
check("dead_columns", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("act_order")
### BEGIN HIDDEN TESTS
check("act_order", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("groups")
### BEGIN HIDDEN TESTS
check("groups", hidden=True)
### END HIDDEN TESTS
