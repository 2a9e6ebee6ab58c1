"""GPTQ (Frantar, Ashkboos, Hoefler, Alistarh, "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
Transformers", arXiv 2210.17323, ICLR 2023): one linear layer's weight quantized column by column, each column's
rounding error fed back into the columns not yet quantized so that the layer's output on calibration inputs moves
as little as possible.

This follows the authors' code, github.com/IST-DASLab/gptq, gptq.py (`GPTQ.add_batch`, `GPTQ.fasterquant`) and
quant.py (`Quantizer` configured with perchannel=True, sym=False, mse=False), step by step:

1. H = 2 X^T X / n from the calibration inputs X (n rows of d_col features), accumulated batch by batch as
   add_batch does (H *= n / (n + m); H += 2 / (n + m) x^T x). Here n counts rows (tokens); add_batch counts
   `inp.shape[0]`, the number of sequences, before flattening them to tokens. The factor does not matter: GPTQ's
   result is the same for H and c H, c > 0 (the dampening is relative and the update uses ratios of H^-1).
2. Dead columns: where H_ii == 0 (feature i is 0 on every calibration input) set H_ii = 1 and W[:, i] = 0.
3. act_order: columns taken in order of decreasing H_ii (a stable sort here: ties keep their order; torch.argsort
   is not stable, but tied columns of H give the same result in either order only when they are interchangeable,
   e.g. two dead ones); the permutation is undone on the result.
4. Dampening: H_ii += percdamp * mean(diag H) (after step 2), so that H is positive definite even when the
   calibration set has fewer rows than features or collinear ones.
5. U = the upper Cholesky factor of H^-1 (H^-1 = U^T U), via H's own Cholesky factor as cholesky_inverse does.
6. Columns in blocks of `block_size` (lazy batch updates, sec. 4 step 2): in a block, column j is quantized,
   err = (w_j - q_j) / U_jj, and the block's later columns get W[:, j:] -= err U[j, j:]; at the end of the block the
   columns after it get W[:, i2:] -= Err U[i1:i2, i2:] at once, a matrix product. The result does not depend on
   block_size: the order of the arithmetic changes, not what is computed.
7. The quantizer: per row, asymmetric min-max (aisys.quant.affine's convention: codes in [-2**(bits-1),
   2**(bits-1) - 1], range [min(w.min(), 0), max(w.max(), 0)], scale rounded to float32, round half to even; the
   original's unsigned codes in [0, 2**bits - 1] are these plus 2**(bits-1), with the same dequantized values).
   With group_size, a row's parameters are chosen anew when a group starts (its first column is quantized), from
   the group's CURRENT weights, those updated by every column quantized before (static_groups=False). Without
   groups the whole row is one group, its parameters chosen before the first column.

Two places where this differs from the original, both stated:
- with group_size, the original chooses a group's parameters from W[:, j:j+g], which inside a block of the lazy
  update does not yet hold the updates of the block's columns already quantized (they live in its block copy W1).
  This reference uses the fully updated weights, so the result is the same for every block_size; the two agree
  whenever block_size divides group_size (every group then starts at a block's start), e.g. the usual 128 and 128.
- without groups, the original chooses the per-row parameters before zeroing the dead columns; here after (the one
  rule above), so that a dead column's weight, which multiplies an input that is always 0, does not stretch its
  row's range. They differ only where a dead column holds a row's minimum or maximum.

With act_order and group_size, groups are `group_size` consecutive columns in the PERMUTED order, as in the original
(static_groups=False): in the layer's own column order a group's columns are scattered, and `group_index` (the
g_idx of GPTQ checkpoints) gives each column's group.

Everything is computed in float64, so that the checks compare exact arithmetic; the quantized weight is float32
(affine.dequantize's (q - zero_point) * scale) and each column's error is taken against that float32 value.
Cost: O(d_row * d_col^2) for the column updates plus O(d_col^3) for the Cholesky factorizations.
"""

from dataclasses import dataclass

import numpy as np

from .._validate import finite_array, nonnegative_number, positive_int
from . import affine


@dataclass(frozen=True)
class GPTQResult:
    """A GPTQ-quantized weight. Columns are in the layer's own order (a permutation by act_order undone)."""

    weight: np.ndarray  # float32 (d_row, d_col): the dequantized weight, what the layer computes with
    codes: np.ndarray  # int8 (d_row, d_col), in [-2**(bits-1), 2**(bits-1) - 1]
    scale: np.ndarray  # float32 (d_row, n_groups)
    zero_point: np.ndarray  # int32 (d_row, n_groups)
    group_index: np.ndarray  # int64 (d_col,): the group of each column: weight == (codes - zp[:, g]) * scale[:, g]
    order: np.ndarray  # int64 (d_col,): the columns in the order they were quantized (arange without act_order)


def _matrix(name: str, value, shape=None) -> np.ndarray:
    array = finite_array(name, value, ndim=2, nonempty=True)
    if shape is not None and array.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {array.shape}")
    return array.astype(np.float64)


def hessian(batches) -> np.ndarray:
    """H = 2 X^T X / n (float64, d_col x d_col) over the rows of every batch, accumulated as add_batch does.

    Each batch is an array (..., d_col) of a layer's inputs; its leading axes are flattened to rows (tokens).
    """
    if isinstance(batches, np.ndarray):
        batches = [batches]
    batches = list(batches)
    if not batches:
        raise ValueError("batches must hold at least one array of inputs, got none")
    H, n = None, 0
    for i, batch in enumerate(batches):
        x = np.asarray(batch)
        if x.ndim < 1 or x.dtype.kind != "f" or not np.isfinite(x).all():
            raise ValueError(f"batches[{i}] must be an array of finite floats (..., d_col), got {x.dtype} of shape "
                             f"{x.shape}")
        x = x.reshape(-1, x.shape[-1]).astype(np.float64)
        if H is None:
            H = np.zeros((x.shape[1], x.shape[1]))
        elif x.shape[1] != H.shape[0]:
            raise ValueError(f"batches[{i}] has {x.shape[1]} features, the first batch {H.shape[0]}")
        m = x.shape[0]
        if m == 0:
            continue
        H *= n / (n + m)
        n += m
        x = np.sqrt(2 / n) * x
        H += x.T @ x
    if n == 0:
        raise ValueError("batches must hold at least one row of inputs, got none")
    return H


def hessian_inverse_factor(H, percdamp: float = 0.01) -> np.ndarray:
    """U, the upper Cholesky factor of the damped H's inverse (H^-1 = U^T U, float64), after setting H_ii = 1 where
    H_ii == 0 (dead columns); the dampening adds percdamp * mean(diag H) to H's diagonal."""
    H = _matrix("H", H).copy()
    if H.shape[0] != H.shape[1] or not np.allclose(H, H.T, rtol=1e-10, atol=0):
        raise ValueError(f"H must be a symmetric square matrix, got shape {H.shape}")
    percdamp = nonnegative_number("percdamp", percdamp)
    diagonal = np.arange(len(H))
    dead = np.diag(H) == 0
    H[dead, dead] = 1.0
    H[diagonal, diagonal] += percdamp * np.mean(np.diag(H))
    try:
        lower = np.linalg.cholesky(H)  # H = L L^T
    except np.linalg.LinAlgError:
        raise ValueError("H plus its dampening is not positive definite: raise percdamp (the calibration set has "
                         "fewer rows than features, or collinear ones)") from None
    lower_inv = np.linalg.inv(lower)
    H_inv = lower_inv.T @ lower_inv  # cholesky_inverse: H^-1 = L^-T L^-1
    return np.linalg.cholesky(H_inv).T


def _params(current: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-row asymmetric min-max parameters of the group's current weights: (scale (d_row,), zero_point (d_row,))."""
    scale, zero_point = affine.choose_qparams(current, bits=bits, symmetric=False, granularity="channel")
    return scale[:, 0], zero_point[:, 0]


def gptq_quantize(weight, inputs=None, *, hessian_matrix=None, bits: int = 4, group_size: int | None = None,
                  block_size: int = 128, act_order: bool = False, percdamp: float = 0.01) -> GPTQResult:
    """GPTQ of one linear layer's weight (d_row, d_col) (y = x W^T, as torch.nn.Linear), from calibration `inputs`
    (an array (..., d_col), or a list of them, as the layer sees them) or their `hessian_matrix` (2 X^T X / n).

    group_size None quantizes each row as one group; block_size is the lazy update's block (any value gives the
    same result). See the module's docstring for every rule.
    """
    W = _matrix("weight", weight).copy()
    rows, cols = W.shape
    if (inputs is None) == (hessian_matrix is None):
        raise ValueError("give exactly one of inputs and hessian_matrix")
    H = hessian(inputs) if inputs is not None else _matrix("hessian_matrix", hessian_matrix)
    if H.shape != (cols, cols):
        raise ValueError(f"the Hessian must be ({cols}, {cols}) for a weight of {cols} columns, got {H.shape}")
    affine.int_range(bits, False)  # bits in [2, 8]
    group = cols if group_size is None else positive_int("group_size", group_size)
    block_size = positive_int("block_size", block_size)
    if not isinstance(act_order, (bool, np.bool_)):
        raise ValueError(f"act_order must be True or False, got {act_order!r}")

    dead = np.diag(H) == 0
    H = H.copy()
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    order = np.argsort(-np.diag(H), kind="stable") if act_order else np.arange(cols)
    W, H = W[:, order], H[np.ix_(order, order)]
    U = hessian_inverse_factor(H, percdamp)

    n_groups = -(-cols // group)
    Q = np.zeros((rows, cols), np.float32)
    codes = np.zeros((rows, cols), np.int8)
    scale = np.zeros((rows, n_groups), np.float32)
    zero_point = np.zeros((rows, n_groups), np.int32)
    for i1 in range(0, cols, block_size):
        i2 = min(i1 + block_size, cols)
        W1 = W[:, i1:i2].copy()  # the block, updated column by column
        errors = np.zeros((rows, i2 - i1))
        for i in range(i2 - i1):
            j = i1 + i
            if j % group == 0:  # a group starts: its parameters from its current weights, updates so far included
                after = W[:, i2:j + group] - errors[:, :i] @ U[i1:j, i2:j + group]  # the block's pending updates
                s, z = _params(np.concatenate([W1[:, i:j + group - i1], after], axis=1), bits)
                scale[:, j // group], zero_point[:, j // group] = s, z
            c = affine.quantize(W1[:, i:i + 1], s[:, None], z[:, None], bits=bits, symmetric=False)
            q = affine.dequantize(c, s[:, None], z[:, None])[:, 0]
            codes[:, j], Q[:, j] = c[:, 0], q
            errors[:, i] = (W1[:, i] - q) / U[j, j]
            W1[:, i:] -= np.outer(errors[:, i], U[j, j:i2])
        W[:, i2:] -= errors @ U[i1:i2, i2:]  # the lazy update of every later column, at once

    inverse = np.argsort(order)
    group_index = np.empty(cols, np.int64)
    group_index[order] = np.arange(cols) // group
    return GPTQResult(weight=Q[:, inverse], codes=codes[:, inverse], scale=scale, zero_point=zero_point,
                      group_index=group_index, order=order.astype(np.int64))


def gptq(weight, H, *, bits: int = 4, group_size: int | None = None, block_size: int = 128, act_order: bool = False,
         percdamp: float = 0.01) -> np.ndarray:
    """The dequantized GPTQ weight (float32, d_row x d_col) from the Hessian H: the exercise's function."""
    return gptq_quantize(weight, hessian_matrix=H, bits=bits, group_size=group_size, block_size=block_size,
                         act_order=act_order, percdamp=percdamp).weight


def round_to_nearest(weight, *, bits: int = 4, group_size: int | None = None) -> np.ndarray:
    """The baseline (RTN): every weight rounded to its nearest level with the same quantizer, per row or per group of
    `group_size` consecutive columns, parameters from the weight itself; no error feedback (float32)."""
    W = _matrix("weight", weight)
    affine.int_range(bits, False)
    group = W.shape[1] if group_size is None else positive_int("group_size", group_size)
    out = np.empty(W.shape, np.float32)
    for start in range(0, W.shape[1], group):
        part = W[:, start:start + group]
        out[:, start:start + group] = affine.fake_quantize(part, bits=bits, symmetric=False, granularity="channel")
    return out


def hessian_error(weight, quantized, H) -> float:
    """tr((W - Q) H (W - Q)^T): with H = 2 X^T X / n, twice the mean squared error of the layer's outputs
    ||X W^T - X Q^T||^2 / n summed over output features, the quantity GPTQ makes small."""
    W = _matrix("weight", weight)
    delta = W - _matrix("quantized", quantized, W.shape)
    H = _matrix("H", H, (W.shape[1], W.shape[1]))
    return float(np.einsum("ij,jk,ik->", delta, H, delta))


def expected_error_factors(H, percdamp: float = 0.01) -> tuple[float, float]:
    """(sum_j 1 / U_jj^2, tr(H)) of the damped H: the Hessian-weighted error that independent rounding errors of
    variance v per weight give, per row and per unit v, with error feedback (GPTQ) and without (round to nearest).
    1 / U_jj^2 is the variance of feature j left after regressing it on the features quantized later: never more
    than H_jj, so GPTQ's expected error is never above RTN's (in the absence of clamping)."""
    U = hessian_inverse_factor(H, percdamp)
    H = np.array(_matrix("H", H))
    dead = np.diag(H) == 0
    H[dead, dead] = 1.0
    H[np.arange(len(H)), np.arange(len(H))] += percdamp * np.mean(np.diag(H))
    return float(np.sum(1.0 / np.diag(U) ** 2)), float(np.trace(H))


def update_multiply_adds(d_row: int, d_col: int) -> int:
    """Multiply-adds of GPTQ's error feedback on a (d_row, d_col) weight: column j's error updates the d_row weights
    of each of the d_col - 1 - j columns after it (lazy blocks change when, not how many)."""
    d_row, d_col = positive_int("d_row", d_row), positive_int("d_col", d_col)
    return d_row * d_col * (d_col - 1) // 2


def obq_multiply_adds(d_row: int, d_col: int) -> int:
    """Multiply-adds of OBQ's inverse updates: every row follows its own order, so each eliminates its own
    (d_col - k) x (d_col - k) inverse Hessian at step k, k = 0 .. d_col - 1: d_row * sum of squares up to d_col."""
    d_row, d_col = positive_int("d_row", d_row), positive_int("d_col", d_col)
    return d_row * d_col * (d_col + 1) * (2 * d_col + 1) // 6
