"""Softmax, its one-pass statistics and the cross-entropy built on it: the references the chapter 9 drills grade.

Every function computes in float64 from its inputs, whatever their dtype: a reference should not be the thing that
rounds. The softmax itself is aisys.inference.attention's (the maximum subtracted first, so no exp overflows).
"""

import numpy as np

from aisys.inference.attention import softmax as stable_softmax


def _float32_rows(name: str, x) -> np.ndarray:
    """x as a float32 array of rows along its last axis, each with at least one finite entry and no NaN or +inf."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"{name} must be a float32 array whose last axis has at least one element, got "
                         f"{getattr(x, 'dtype', type(x).__name__)} of shape {getattr(x, 'shape', None)}")
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError(f"{name} must hold no NaN and no +inf (-inf is allowed)")
    if x.size and not np.isfinite(x).any(axis=-1).all():
        raise ValueError(f"every row of {name} (along its last axis) must hold at least one finite value")
    return x


def softmax(x) -> np.ndarray:
    """Softmax of a float32 array along its last axis, computed in float64 and rounded once to float32.

    -inf entries get probability 0; every row must hold a finite value (a row of -inf alone has no softmax).
    """
    x = _float32_rows("x", x)
    return stable_softmax(x.astype(np.float64), axis=-1).astype(np.float32)


def online_softmax_stats(chunks) -> tuple[np.ndarray, np.ndarray]:
    """The running statistics of a row given in chunks, after each chunk: (m, d), two float64 arrays of len(chunks).

    m[i] is the largest element of chunks[0..i] and d[i] the sum of exp(x - m[i]) over those elements (Milakov &
    Gimelshein 2018 call them m_j and d_j); before any element m = -inf and d = 0, so an empty first chunk gives
    (-inf, 0). Computed from each prefix directly (two passes over it), not by the one-pass recurrence the drill asks
    for: the definition the recurrence must meet.
    """
    if not isinstance(chunks, list | tuple) or not chunks:
        raise ValueError(f"chunks must be a non-empty list of 1-D arrays, got {type(chunks).__name__}")
    parts = [np.asarray(c, dtype=np.float64) for c in chunks]
    for i, part in enumerate(parts):
        if part.ndim != 1 or not np.isfinite(part).all():
            raise ValueError(f"chunks[{i}] must be a 1-D array of finite numbers, got shape {part.shape}")
    m, d = np.full(len(parts), -np.inf), np.zeros(len(parts))
    for i in range(len(parts)):
        prefix = np.concatenate(parts[:i + 1])
        if prefix.size:
            m[i] = prefix.max()
            d[i] = np.exp(prefix - m[i]).sum()
    return m, d


def cross_entropy(logits, targets, ignore_index: int = -100) -> float:
    """Mean of -log softmax(logits[i])[targets[i]] over the rows whose target is not ignore_index, as
    F.cross_entropy(reduction="mean") without class weights; NaN when every row is ignored (or there are none).

    log softmax is x - logsumexp(x), with logsumexp(x) = m + log(sum(exp(x - m))): no exp overflows, and a target far
    below the maximum gets its true (large) loss rather than log(0).
    """
    logits, targets = np.asarray(logits), np.asarray(targets)
    if logits.ndim != 2 or logits.shape[1] < 1 or not np.isfinite(logits).all():
        raise ValueError(f"logits must be an (N, C) array of finite numbers with C >= 1, got shape {logits.shape}")
    if targets.shape != logits.shape[:1] or targets.dtype.kind not in "iu":
        raise ValueError(f"targets must be N = {logits.shape[0]} integers, got {targets.dtype} of shape "
                         f"{targets.shape}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int | np.integer):
        raise ValueError(f"ignore_index must be an integer, got {ignore_index!r}")
    kept = targets != ignore_index
    if ((targets[kept] < 0) | (targets[kept] >= logits.shape[1])).any():
        raise ValueError(f"targets must be class indices in [0, {logits.shape[1]}) or ignore_index {ignore_index}")
    if not kept.any():
        return float("nan")
    z = logits[kept].astype(np.float64)
    m = z.max(axis=1)
    logsumexp = m + np.log(np.exp(z - m[:, None]).sum(axis=1))
    return float(np.mean(logsumexp - z[np.arange(len(z)), targets[kept]]))

