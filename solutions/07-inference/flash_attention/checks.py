"""Checks: FlashAttention's forward in numpy, one head, tile by tile.

Every function is compared with the reference `aisys.inference.flash_attention` on the
same input: `tile_state` and `combine` (the online softmax's two steps, exact up to rounding,
including rows of only -inf and both sides empty), `tile_pairs` (which (q tile, k tile) pairs
causal attention computes, and which need the mask: exact), and `flash_attention` itself on
prefill shapes (Tq == Tk, causal and not), on decode and chunk shapes (Tq < Tk, where the
bottom-right causal convention matters) and on scores in the thousands (where exp overflows
float32 and float64 without the max subtraction). Hidden shapes cover one token, lengths that
no block divides, blocks of one and blocks longer than the sequence, block_q > block_k (causal
tiles then hold rows with no visible key), float32 and float64.

The large-logit cases hold rows whose scores are all in the thousands and rows whose scores are all
below -1000, on every seed: a running max that starts at 0 instead of -inf underflows there (l = 0,
NaN). `out` must be in q's dtype. Two checks grade how the pass runs, in the grader's clean room
(`student.traced_call`): its peak memory on a size where one (Tq, Tk) matrix is 16 times what the
tiled pass holds, and, causal, how many tiles it computes (its calls of `tile_state`, one per tile,
against `tile_pairs`).
"""

import math

import numpy as np

from aisys.inference import flash_attention as reference

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, assert_format


DTYPES = (np.float32, np.float64)
# (rtol, atol): float32 results are compared with the reference's float32 ones, which add in another order
TOLERANCE = {np.float32: (1e-4, 1e-5), np.float64: (1e-9, 1e-9)}
LARGE_TOLERANCE = {np.float32: (2e-3, 2e-3), np.float64: (1e-8, 1e-8)}  # scores ~1e3: float32 rounds them by ~1e-4
LARGE = 1000.0  # q is scaled by this: scores of about +-1000, past exp's range (88.7 in float32, 709.8 in float64)


def _in_dtype_of(tolerance):
    """compare_cases' compare: each array of the result in the reference's dtype (float32 stays float32), then the
    values within tolerance(case)."""
    def compare(got, expected, case):
        if isinstance(got, list) and len(got) == len(expected):
            for i, (g, e) in enumerate(zip(got, expected)):
                assert_format(g, e.dtype.name, where=f"result[{i}]")
        assert_close(got, expected, rtol=tolerance(case)[0], atol=tolerance(case)[1])
    return compare


# --- tile_state -----------------------------------------------------------------------------------------------------

def _scores(rng, rows, cols, dtype, magnitude=3.0, masked=0.0, empty_rows=()):
    """A tile of scores: normal times `magnitude`, a share `masked` set to -inf, and whole rows of -inf."""
    s = magnitude * rng.standard_normal((rows, cols))
    s[rng.random((rows, cols)) < masked] = -np.inf
    s[list(empty_rows)] = -np.inf
    return s.astype(dtype)


DTYPE_HINT = "Keep the inputs' dtype: float32 in, float32 out (np.zeros(n) and friends make float64 unless told)."


def _other_dtype(got, expected) -> bool:
    return isinstance(got, list) and len(got) == len(expected) and any(
        isinstance(g, np.ndarray) and g.dtype != e.dtype for g, e in zip(got, expected))


def _state_hint(case, got, expected):
    if _other_dtype(got, expected):
        return DTYPE_HINT
    if isinstance(got, list) and len(got) == 3 and any(isinstance(g, np.ndarray) and np.isnan(g).any() for g in got):
        return ("NaN: a row of only -inf has max -inf, and scores - m is -inf - (-inf) = NaN. Subtract 0 there "
                "instead (np.where(np.isneginf(m), 0.0, m)): its state is then (-inf, 0, 0).")
    return ("Return (m, l, acc): m the row maxima, l = sum(exp(scores - m)) along each row, acc = exp(scores - m) @ v. "
            "Subtracting each row's own max keeps every exponent <= 0.")


@check(points=1)
def tile_state(student, rng, hidden):
    """tile_state(scores, v) gives each row's max, sum of exp(s - max) and weighted sum of v; (-inf, 0, 0) if all
    -inf."""
    if not hidden:
        plan = [(3, 4, 2, np.float64, 3.0, 0.0, ()), (3, 3, 3, np.float32, 1000.0, 0.3, (2,))]
    else:
        plan = [(1, 1, 1, np.float64, 3.0, 0.0, ()), (2, 5, 4, np.float32, 3000.0, 0.2, (0,))]
        plan += [(int(rng.integers(1, 10)), int(rng.integers(1, 10)), int(rng.integers(1, 9)), dtype,
                  float(rng.choice([1.0, 5.0, 2000.0])), float(rng.choice([0.0, 0.4])), ())
                 for dtype in DTYPES for _ in range(3)]
        plan.append((4, 6, 3, np.float64, 3.0, 0.5, (1, 3)))
    cases = [{"scores": _scores(rng, rows, cols, dtype, magnitude, masked, empty),
              "v": rng.standard_normal((cols, hs)).astype(dtype)}
             for rows, cols, hs, dtype, magnitude, masked, empty in plan]
    compare_cases(student, "tile_state", cases, reference.tile_state, returns="any", hidden=hidden,
                  compare=_in_dtype_of(lambda c: TOLERANCE[c["v"].dtype.type]), hint=_state_hint)


# --- combine --------------------------------------------------------------------------------------------------------

def _state(rng, rows, hs, dtype, magnitude, empty):
    """A plausible state: m anywhere, l >= 1 (the max's own term), acc of matching size; (-inf, 0, 0) where empty."""
    m = magnitude * rng.standard_normal(rows)
    l = 1.0 + 5 * rng.random(rows)
    acc = l[:, None] * rng.standard_normal((rows, hs))
    empty = np.asarray(empty, bool)
    m[empty], l[empty], acc[empty] = -np.inf, 0.0, 0.0
    return m.astype(dtype), l.astype(dtype), acc.astype(dtype)


def _combine_case(rng, rows, hs, dtype, magnitude=3.0, empty1=None, empty2=None):
    none = [False] * rows
    m1, l1, acc1 = _state(rng, rows, hs, dtype, magnitude, none if empty1 is None else empty1)
    m2, l2, acc2 = _state(rng, rows, hs, dtype, magnitude, none if empty2 is None else empty2)
    return {"m1": m1, "l1": l1, "acc1": acc1, "m2": m2, "l2": l2, "acc2": acc2}


def _combine_hint(case, got, expected):
    if _other_dtype(got, expected):
        return DTYPE_HINT
    if isinstance(got, list) and len(got) == 3 and any(isinstance(g, np.ndarray) and np.isnan(g).any() for g in got):
        return ("NaN: where both states are empty (m1 = m2 = -inf) the new max is -inf and exp(m1 - m) is "
                "exp(-inf - (-inf)) = NaN. Use 0 in place of a max of -inf: the result stays (-inf, 0, 0).")
    return ("Each side was taken against its own max: with m = max(m1, m2), multiply l1 AND acc1 by exp(m1 - m), "
            "l2 AND acc2 by exp(m2 - m), then add. Rescaling only l, or neither, weights the keys wrongly.")


@check(points=2)
def combine(student, rng, hidden):
    """combine(m1, l1, acc1, m2, l2, acc2) rescales both sides to the larger max, l and acc alike; empty stays empty."""
    if not hidden:
        cases = [_combine_case(rng, 4, 3, np.float64),
                 _combine_case(rng, 3, 2, np.float32, empty1=[True, False, True], empty2=[False, False, True])]
    else:
        cases = [_combine_case(rng, 1, 1, np.float64), _combine_case(rng, 1, 1, np.float32, empty1=[True])]
        for dtype in DTYPES:
            for magnitude in (1.0, 50.0, 2000.0):
                rows, hs = int(rng.integers(1, 12)), int(rng.integers(1, 10))
                cases.append(_combine_case(rng, rows, hs, dtype, magnitude, rng.random(rows) < 0.3,
                                           rng.random(rows) < 0.3))
        cases.append(_combine_case(rng, 5, 4, np.float64, empty1=[True] * 5, empty2=[True, False, True, False, True]))
        equal = _combine_case(rng, 3, 2, np.float64)
        equal["m2"] = equal["m1"].copy()  # equal maxima: both factors 1
        cases.append(equal)
    compare_cases(student, "combine", cases, reference.combine, returns="any", hidden=hidden,
                  compare=_in_dtype_of(lambda c: TOLERANCE[c["m1"].dtype.type]), hint=_combine_hint)


# --- tile_pairs -----------------------------------------------------------------------------------------------------

def _pairs_hint(case, got, expected):
    if not case["causal"]:
        return "Without a mask every (q tile, k tile) pair is computed, unmasked, i outer and j inner."
    return ("Query row r sits at position Tk - Tq + r (bottom-right), not at r. Keep a k tile if its first key is <= "
            "the position of the q tile's last query; mark it masked if its last key is > the position of the tile's "
            "first query. Tiles at the edges are shorter when a block does not divide the length.")


@check(points=2)
def tile_pairs(student, rng, hidden):
    """tile_pairs(t_q, t_k, block_q, block_k, causal) lists the tiles attention computes and which need a mask."""
    if not hidden:
        plan = [(8, 8, 4, 4, True), (2, 8, 4, 4, True), (5, 7, 2, 3, False), (10, 10, 4, 3, True)]
    else:
        plan = [(1, 1, 1, 1, True), (1, 50, 16, 16, True), (1, 50, 16, 16, False), (7, 7, 16, 16, True),
                (13, 40, 4, 8, True), (40, 40, 8, 4, True), (30, 30, 1, 1, True)]
        for _ in range(12):
            t_q = int(rng.integers(1, 40))
            plan.append((t_q, t_q + int(rng.choice([0, rng.integers(1, 40)])), int(rng.integers(1, 17)),
                         int(rng.integers(1, 17)), bool(rng.random() < 0.75)))
    cases = [dict(zip(("t_q", "t_k", "block_q", "block_k", "causal"), p)) for p in plan]
    compare_cases(student, "tile_pairs", cases, reference.tile_schedule, returns="any", hidden=hidden,
                  tolerance=(0, 0), hint=_pairs_hint)


# --- flash_attention ------------------------------------------------------------------------------------------------

def _flash_case(rng, t_q, t_k, hs, causal, block_q, block_k, dtype, large=False, negative_rows=False):
    """q, k, v of one head; with `large`, scores of about +-LARGE and one of exactly 2 LARGE (query 0, key 0); with
    `negative_rows`, every other query from the second on scores below -2 LARGE against every key."""
    q, k, v = rng.standard_normal((t_q, hs)), rng.standard_normal((t_k, hs)), rng.standard_normal((t_k, hs))
    if large:
        q *= LARGE
        q[0] = k[0] * (2 * LARGE * math.sqrt(hs) / (k[0] @ k[0]))  # every query sees key 0 (t_q == t_k)
    if negative_rows:  # every key points along axis 0, these queries against it: exp(s - 0) underflows to 0
        k[:, 0] = 2 + np.abs(k[:, 0])
        q[1::2] = 0.0
        q[1::2, 0] = -LARGE * math.sqrt(hs)
    return {"q": q.astype(dtype), "k": k.astype(dtype), "v": v.astype(dtype), "causal": causal,
            "block_q": block_q, "block_k": block_k}


def _flash_expected(q, k, v, causal, block_q, block_k):
    """The reference on one head: (out (Tq, hs), lse (Tq,))."""
    q, k, v = (x[:, None] for x in (q, k, v))
    out, lse = reference.flash_attention(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
    return [out[:, 0], lse[:, 0]]


def _flash_hint(case, got, expected):
    if not (isinstance(got, list) and len(got) == 2 and all(isinstance(g, np.ndarray) for g in got)):
        return "Return (out, lse): out (Tq, hs) in q's dtype and lse (Tq,)."
    out, lse = got
    if _other_dtype(got, expected):
        return ("Compute in np.promote_types(q.dtype, np.float32), lse in that dtype too, and return out in q's dtype "
                "(out.astype(q.dtype)).")
    scores_large = np.abs(case["q"]).max() > 100
    if out.shape == expected[0].shape and not np.isfinite(out).all():
        scores = case["q"].astype(np.float64) @ case["k"].T / math.sqrt(case["q"].shape[1])
        if case["causal"]:
            t_q, t_k = scores.shape
            scores[np.arange(t_k)[None, :] > np.arange(t_k - t_q, t_k)[:, None]] = -np.inf
        if (scores.max(axis=1)[~np.isfinite(out).all(axis=1)] < -100).all():  # only rows of very negative scores
            return ("NaN in the rows whose scores are all below -100 only: the running max must start at -inf, not "
                    "0; from 0, exp(s - 0) underflows to 0 there, so l = 0 and acc / l = 0 / 0.")
        if scores_large:
            return ("inf or NaN with scores in the thousands: exp(s) overflows (float32 past 88.7, float64 past "
                    "709.8). "
                    "Subtract each row's running max before exp, and rescale by exp(m_old - m_new) <= 1.")
        return ("NaN: with block_q > block_k a causal tile can hold rows whose keys all lie after the query; their "
                "max is -inf and -inf - (-inf) = NaN. Use 0 as the stand-in max of such rows, in tile_state and "
                "combine. "
                "Also check the mask keeps the diagonal: query i sees key j iff j <= Tk - Tq + i.")
    if out.shape == expected[0].shape and np.allclose(out, expected[0], rtol=1e-3, atol=1e-3):
        return "out is right but lse is not: lse = m + log(l), the log of sum(exp(scores)) of each row (natural log)."
    if case["causal"]:
        return ("Causal: query row r sits at position Tk - Tq + r and sees key j iff j <= Tk - Tq + r, its own "
                "position included. If that is right: rescale both l and acc when the max grows, and divide acc by l "
                "once, after the last k tile.")
    return ("Rescale both l and acc by exp(m_old - m_new) when a tile raises the max, and divide acc by l once, after "
            "the last k tile (dividing inside the loop weights the earlier tiles wrongly).")


def _flash(student, cases, hidden, large=False):
    table = LARGE_TOLERANCE if large else TOLERANCE

    compare_cases(student, "flash_attention", cases, _flash_expected, returns="any", hidden=hidden,
                  compare=_in_dtype_of(lambda c: table[c["q"].dtype.type]), hint=_flash_hint)


def _random_blocks(rng, t):
    return int(rng.integers(1, max(2, t + 5))), int(rng.integers(1, max(2, t + 5)))


@check(points=3)
def flash_attention(student, rng, hidden):
    """flash_attention(q, k, v, causal, block_q, block_k) equals softmax attention on prefill shapes (Tq == Tk)."""
    if not hidden:
        plan = [(10, 4, True, 4, 4, np.float64), (7, 8, False, 3, 5, np.float32), (12, 4, True, 8, 4, np.float64)]
    else:
        plan = [(1, 4, True, 4, 4, np.float64), (1, 1, False, 1, 1, np.float32), (17, 8, True, 64, 64, np.float32),
                (20, 4, True, 1, 1, np.float64), (33, 16, True, 16, 4, np.float32), (30, 8, False, 8, 16, np.float64)]
        for dtype in DTYPES:
            for causal in (True, False):
                t = int(rng.integers(2, 80))
                plan.append((t, int(rng.integers(1, 17)), causal, *_random_blocks(rng, t), dtype))
    cases = [_flash_case(rng, t, t, hs, causal, bq, bk, dtype) for t, hs, causal, bq, bk, dtype in plan]
    _flash(student, cases, hidden)


@check(points=2)
def flash_attention_decode(student, rng, hidden):
    """flash_attention with fewer queries than keys, causal: a decode step (Tq = 1) and prefill chunks, bottom-right."""
    if not hidden:
        plan = [(1, 20, 8, 4, 8, np.float64), (5, 23, 4, 8, 4, np.float32)]
    else:
        plan = [(1, 2, 4, 1, 1, np.float64), (1, 100, 8, 16, 16, np.float32), (3, 64, 4, 2, 32, np.float64),
                (13, 50, 8, 8, 4, np.float32)]
        for dtype in DTYPES:
            for _ in range(2):
                t_q = int(rng.integers(1, 20))
                t_k = t_q + int(rng.integers(1, 60))
                plan.append((t_q, t_k, int(rng.integers(1, 17)), *_random_blocks(rng, t_q), dtype))
    cases = [_flash_case(rng, t_q, t_k, hs, True, bq, bk, dtype) for t_q, t_k, hs, bq, bk, dtype in plan]
    _flash(student, cases, hidden)


@check(points=2)
def flash_attention_large_logits(student, rng, hidden):
    """flash_attention stays finite and right with scores in the thousands, where exp overflows float32 and float64."""
    # rows of scores all below -1000 next to rows in the thousands, on every seed: both ways exp leaves its range
    plan = [(16, 8, True, 8, 4, np.float64, True), (9, 4, False, 4, 4, np.float32, True)]
    if hidden:
        plan = [(1, 8, True, 4, 4, np.float32, False), (24, 16, True, 16, 8, np.float32, True),
                (30, 4, False, 7, 5, np.float64, True)]
        for dtype in DTYPES:
            for causal in (True, False):
                t = int(rng.integers(2, 50))
                plan.append((t, int(rng.integers(2, 17)), causal, *_random_blocks(rng, t), dtype, False))
    cases = [_flash_case(rng, t, t, hs, causal, bq, bk, dtype, large=True, negative_rows=negative)
             for t, hs, causal, bq, bk, dtype, negative in plan]
    _flash(student, cases, hidden, large=True)


# --- how the pass runs: memory and tiles ----------------------------------------------------------------------------

MEMORY_T, MEMORY_BLOCK = 1024, 64  # one (T, T) float64 matrix: 8 MiB; the tiled pass holds under 1 MiB


@check(points=2)
def flash_attention_memory(student, rng, hidden):
    """flash_attention never holds a (Tq, Tk) array: its peak memory at T = 1024 stays far below one score matrix."""
    case = _flash_case(np.random.default_rng(MEMORY_T), MEMORY_T, MEMORY_T, 8, False, MEMORY_BLOCK, MEMORY_BLOCK,
                       np.float64)
    _, trace = student.traced_call("flash_attention", returns="any", **case)  # the values: the checks above
    label = f"flash_attention(T_q = T_k = {MEMORY_T}, hs = 8, float64, block_q = block_k = {MEMORY_BLOCK})"
    matrix = MEMORY_T * MEMORY_T * 8
    if trace["peak_bytes"] > matrix / 4:
        raise CheckFailure(
            f"{label} held up to {trace['peak_bytes'] / 2**20:.1f} MiB at once, where one (T_q, T_k) score matrix "
            f"takes {matrix / 2**20:.0f} MiB and the tiled pass under 1 MiB: it builds the scores of whole rows or "
            "of the whole matrix, which is what FlashAttention avoids; compute q_tile @ k_tile.T one (block_q, "
            "block_k) tile at a time and fold each into the running (m, l, acc).")


CAUSAL_TILES = (64, 64, 8, 8)  # (t_q, t_k, block_q, block_k): 36 of the 64 tiles are computed
CHUNK_TILES = (20, 50, 8, 16)  # a prefill chunk after 30 cached tokens


@check(points=2)
def flash_attention_causal_tiles(student, rng, hidden):
    """Causal flash_attention computes only the tiles tile_pairs lists (about half at Tq = Tk), one tile_state each."""
    for t_q, t_k, block_q, block_k in (CAUSAL_TILES, CHUNK_TILES):
        case = _flash_case(np.random.default_rng(t_q), t_q, t_k, 4, True, block_q, block_k, np.float64)
        label = f"flash_attention(T_q = {t_q}, T_k = {t_k}, causal, block_q = {block_q}, block_k = {block_k})"
        _, trace = student.traced_call("flash_attention", returns="any", **case)
        needed, every = (len(reference.tile_schedule(t_q, t_k, block_q, block_k, causal)) for causal in (True, False))
        computed = trace["calls"].get("tile_state", 0)
        if computed == 0:
            raise CheckFailure(f"{label} never called tile_state: compute each tile's state with tile_state, as "
                               "section 4 says; the grader counts those calls to see which tiles were computed.")
        if computed != needed:
            more = (f"; a causal pass skips the tiles whose keys all lie after every query of the q tile, as "
                    f"tile_pairs leaves them out (here {every - needed} of the {every}), which saves about half the "
                    "work at T_q = T_k") if computed > needed else \
                (": some tiles of visible keys were left out; query row r sits at position T_k - T_q + r (see the "
                 "check tile_pairs)")
            raise CheckFailure(f"{label} called tile_state {computed} times, for the {needed} tiles tile_pairs "
                               f"lists{more}.")
