"""Checks: FlashAttention-2's backward kernels, dQ, dK and dV.

Expected values are torch autograd of softmax attention computed plainly in float64 on the CPU from
the inputs as the student receives them (rounded to their dtype), with o and the natural lse of the
same float64 computation sent as the forward would store them, and random upstream gradients dO. On a
CPU the kernels run in Triton's interpreter on float32 with the launcher's 16 x 16 blocks: head sizes
16 and 32, lengths on both sides of a block (1, 15, 16, 17, 33, 40), Tq != Tk, batch 2, causal bottom-right
(prefill, decode, chunks), and grouped-query heads (2 and 4 query heads per kv head). A GPU-only check
(skipped elsewhere) runs bfloat16 at head sizes 64 and 128.

`backward_recomputes` runs the launcher in the grader's Triton interpreter (the clean room) and reads
its launch reports: what was stored (delta, dQ, dK, dV and nothing else), that lse was read, the tl.dot
multiply-adds (7 per pair of tiles at most), and that a causal prefill skips the blocks past the diagonal.
"""

import math

import numpy as np
import torch

from aisys_grader.checks import check, compare_cases, require_gpu
from aisys_grader.compare import CheckFailure, assert_close
from aisys_grader.low_precision import as_sent

# float32 kernels against float64 truth: sums of ~40 float32 products of unit-sized numbers err by ~1e-6, the
# inputs o and lse are float32-rounded (relative 6e-8); 1e-4 leaves room and catches every wrong answer (they err
# by 1e-1 or more).
TOLERANCE = {"fp32": (1e-4, 1e-4)}
# bf16 (8-bit mantissa, relative 4e-3): P and dS are rounded to bf16 before tl.dots of hundreds of terms, and dO, o
# arrive in bf16; an error of 4% of the largest gradient entry is what that rounding allows (torch's own bf16 SDPA
# backward errs by a few 1e-3 of it), while a wrong formula errs by the size of the gradient itself.
GPU_RELATIVE = 4e-2


def _truth(q, k, v, do, causal):
    """[o, lse, dq, dk, dv] in float64 by torch autograd, every score computed, causal bottom-right."""
    q, k, v = (torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    scores = q @ k.repeat_interleave(group, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        t_q, t_k = q.shape[2], k.shape[2]
        scores = scores.masked_fill(~torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q), float("-inf"))
    out = torch.softmax(scores, -1) @ v.repeat_interleave(group, 1)
    grads = torch.autograd.grad(out, (q, k, v), torch.tensor(np.asarray(do, np.float64)))
    return [out.detach().numpy(), torch.logsumexp(scores, -1).detach().numpy(), *(g.numpy() for g in grads)]


def _case(rng, batch, heads, kv_heads, t_q, t_k, hs, causal, dtype):
    """The launcher's arguments, and the float64 [dq, dk, dv] they must give."""
    q, do = (as_sent(rng.standard_normal((batch, heads, t_q, hs)), dtype) for _ in range(2))
    k, v = (as_sent(rng.standard_normal((batch, kv_heads, t_k, hs)), dtype) for _ in range(2))
    o, lse, *grads = _truth(q, k, v, do, causal)
    return {"q": q, "k": k, "v": v, "o": as_sent(o, dtype), "lse": lse.astype(np.float32), "do": do,
            "causal": causal, "dtype": dtype}, grads


def _hint(case, got, expected):
    if not (isinstance(got, list) and len(got) == 3):
        return "The launcher returns [dq, dk, dv]: keep it as provided."
    if not all(np.isfinite(g).all() for g in got):
        return ("inf or NaN: P is exp2(s * scale_log2 - lse * log2(e)), 0 where masked (tl.where after exp2, or "
                "-inf before it); keys past T_K and rows past T_Q load as 0.")
    dq, dk, dv = got
    scale = 1 / math.sqrt(case["q"].shape[-1])

    def near(a, b):
        return np.allclose(a, b, rtol=1e-3, atol=1e-3)

    right = [near(g, e) for g, e in zip(got, expected)]
    if right[0] and right[2] and near(dk, expected[1] / scale):
        return "dK is right but for the factor scale: dK = scale * dS^T Q (S = scale * Q K^T)."
    if right[1] and right[2] and near(dq, expected[0] / scale):
        return "dQ is right but for the factor scale: dQ = scale * dS K (S = scale * Q K^T)."
    right_dv = right[2]
    if right_dv and right[0]:
        return ("dQ and dV are right, dK is not: dK of a kv head sums dS^T q over every query head of its group "
                "(heads kv_head * GROUP ... + GROUP - 1), and is multiplied by scale.")
    if right[0]:
        return ("dQ is right, dK and dV are not: those of a kv head sum over every query head of its group (heads "
                "kv_head * GROUP ... kv_head * GROUP + GROUP - 1), each with its own lse and delta.")
    if right_dv:
        return ("dV is right, so P is: dS = P * (dP - delta) with dP = dO V^T and delta = rowsum(dO * O), the "
                "product of dO and O row by row (not rowsum(dO)).")
    if case["causal"]:
        return ("Causal: query row r sits at position T_K - T_Q + r and sees key n iff n <= T_K - T_Q + r; mask P to "
                "0 past it in both kernels, also in the diagonal blocks.")
    return ("Check P first (dV = P^T dO): P = exp2(s * scale * log2(e) - lse * log2(e)), since lse is a natural "
            "log; then dS = P * (dP - delta).")


def _grads(student, rng, plan, dtype, hidden, tolerance=None):
    """The kernels' [dq, dk, dv] on each case of `plan` (_case's shapes) against the float64 truth."""
    cases, truths = [], {}
    for shape in plan:
        case, grads = _case(rng, *shape, dtype)
        cases.append(case)
        truths[id(case["q"])] = grads  # computed with the case, once: the reference looks it up by its q

    def expected(q, **_):
        return truths[id(q)]

    def compare(got, expected, case):
        if not isinstance(got, list) or len(got) != 3:
            raise CheckFailure(f"result: expected [dq, dk, dv], got {type(got).__name__} of {len(got)}")
        for name, g, e in zip(("dq", "dk", "dv"), got, expected):
            g = np.asarray(g, np.float64)
            if not np.isfinite(g).all():
                raise CheckFailure(f"{name} holds inf or NaN")
            if tolerance is None:
                rtol, atol = TOLERANCE[case["dtype"]]
            else:
                rtol, atol = 0.0, tolerance * float(np.abs(e).max())
            assert_close(g, e, rtol=rtol, atol=atol, where=name)

    compare_cases(student, "flash_attention_backward", cases, expected, returns="list", hidden=hidden,
                  compare=compare, hint=_hint)


@check(points=3)
def backward_full(student, rng, hidden):
    """dQ, dK, dV equal autograd of softmax attention, not causal, one kv head per query head, ragged lengths."""
    if not hidden:
        plan = [(1, 1, 1, 40, 40, 16), (1, 1, 1, 16, 33, 32)]
    else:
        plan = [(1, 1, 1, 1, 1, 16), (1, 1, 1, 15, 17, 16), (1, 1, 1, 33, 7, 16),
                (1, 1, 1, int(rng.integers(2, 40)), int(rng.integers(2, 40)), 32)]
    _grads(student, rng, [(*p, False) for p in plan], "fp32", hidden)


@check(points=3)
def backward_causal(student, rng, hidden):
    """dQ, dK, dV equal autograd of causal attention, bottom-right: prefill, a decode step and chunks."""
    if not hidden:
        plan = [(1, 1, 1, 40, 40, 16), (1, 1, 1, 1, 23, 16), (1, 1, 1, 10, 37, 32)]
    else:
        plan = [(1, 1, 1, 1, 1, 16), (1, 1, 1, 17, 17, 16), (1, 1, 1, 20, 35, 16)]
        t_q = int(rng.integers(2, 30))
        plan.append((1, 1, 1, t_q, t_q + int(rng.integers(0, 10)), 16))
    _grads(student, rng, [(*p, True) for p in plan], "fp32", hidden)


@check(points=2)
def backward_gqa(student, rng, hidden):
    """Grouped-query attention: dK and dV of a kv head sum over its 2 or 4 query heads, causal and not."""
    if not hidden:
        plan = [(1, 2, 1, 20, 20, 16, True), (1, 4, 1, 9, 20, 16, False)]
    else:
        plan = [(2, 2, 1, 9, 17, 16, False), (1, 4, 1, 5, 20, 16, True), (1, 2, 1, 1, 19, 32, True)]
    _grads(student, rng, plan, "fp32", hidden)


# Prefills profiled, in the launcher's tiles of 16: 2 x 2 tiles show the tl.dot work per pair of tiles; a causal one
# needs 3 x 3, of which it visits 6 (of 2 x 2 it would visit 3, too near all 4 to tell skipping from not).
RECOMPUTE_T = {False: 32, True: 48}
RECOMPUTE_HS = 16


def _dot_budget(t, hs):
    """tl.dot multiply-adds of the backward of a t-token prefill, 7 products per pair of tiles: dkdv: k q^T, P^T dO,
    v dO^T, dS^T q; dq: q k^T, dO v^T, dS k."""
    return 7 * t * t * hs


@check(points=2)
def backward_recomputes(student, rng, hidden):
    """The kernels recompute P from lse and store nothing but delta, dQ, dK, dV: stores, lse read and tl.dot
    multiply-adds counted in the grader's Triton interpreter; causal skips the tiles past the diagonal."""
    work = {}
    hs = RECOMPUTE_HS
    for causal, t in RECOMPUTE_T.items():
        case, _ = _case(rng, 1, 1, 1, t, t, hs, causal, "fp32")
        _, launches = student.profiled_call("flash_attention_backward", returns="list", dialect="triton", **case)
        stored = sum(launch["stored"] for launch in launches)
        if stored > 3 * t * hs + t:
            raise CheckFailure(f"the backward of a {t}-token head (head size {hs}) stores {stored} numbers: dQ, dK, "
                               f"dV and delta are {3 * t * hs + t}; recompute each tile of P (and dS) in registers "
                               "instead of writing it.")
        if not any(launch["loaded_from"].get("lse_ptr") for launch in launches):
            raise CheckFailure("no kernel reads lse: P = exp2(s * scale_log2 - lse * log2(e)) comes from the stored "
                               "log-sum-exp, without passing over the keys again for the row max and sum.")
        work[causal] = sum(launch["dot_macs"] for launch in launches)
    t = RECOMPUTE_T[False]
    if work[False] > _dot_budget(t, hs):
        raise CheckFailure(f"the backward of a {t}-token prefill does {work[False] / _dot_budget(t, hs):.2g} x the "
                           "tl.dot multiply-adds of 7 products per pair of tiles: read P from lse (one exp2 per "
                           "score) instead of recomputing the row max and sum from the scores.")
    t = RECOMPUTE_T[True]
    if work[True] > 0.7 * _dot_budget(t, hs):
        raise CheckFailure(f"the causal backward of a {t}-token prefill does {work[True] / _dot_budget(t, hs):.0%} "
                           "of the tl.dot work of a non-causal one (7 products per pair of tiles): a key block's "
                           "first query block is the one holding row BLOCK_N * program_id(0) - (T_K - T_Q), and a "
                           "query block's last key block the one holding its last query's position; the tiles beyond "
                           "are all masked.")


@check(points=2)
def backward_gpu(student, rng, hidden):
    """On a GPU: bfloat16, head sizes 64 and 128, causal and not, GQA, within bf16 rounding (needs a GPU)."""
    require_gpu()
    if not hidden:
        plan = [(1, 2, 2, 256, 256, 64, True), (1, 4, 2, 300, 300, 128, False)]
    else:
        plan = [(1, 4, 2, 512, 512, 128, True), (1, 2, 2, 1, 129, 64, True), (1, 2, 1, 129, 129, 64, False),
                (1, 2, 2, 64, 700, 128, True)]
    _grads(student, rng, plan, "bf16", hidden, tolerance=GPU_RELATIVE)
