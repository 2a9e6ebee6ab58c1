"""Checks: the FlashAttention-2 forward kernel, out and log-sum-exp.

Expected values are softmax attention computed plainly in float64 on the CPU from the inputs
as the student receives them (rounded to their dtype): every score, the bottom-right causal
mask, out and the natural log-sum-exp of each row. On a CPU the kernel runs in Triton's
interpreter on float32 with the launcher's 16 x 16 blocks: head sizes 16 and 32, lengths on
both sides of a block (1, 15, 16, 17, 40), Tq < Tk (decode and chunks) when causal, and scores
near +-1000 where exp overflows float32, and, on every seed, rows whose scores all lie below
-200 (a running max that starts at 0 instead of -inf makes every exp2 0 there). A GPU-only check
(skipped elsewhere) runs bfloat16 and float16 at head sizes 64 and 128, Tq == Tk, against the
same float64 truth, within the error torch's own scaled_dot_product_attention makes in that dtype.

`flash_forward_tiles` runs the kernel in the grader's Triton interpreter (the clean room) and
counts its tl.dot multiply-adds: one pass over the keys, and a causal prefill skipping the key
blocks past each tile's last query.
"""

import math

import numpy as np
import torch

from aisys_grader.checks import check, compare_cases, require_gpu
from aisys_grader.compare import CheckFailure, assert_close
from aisys_grader.low_precision import as_sent


TOLERANCE = {"fp32": (1e-4, 1e-5), "fp16": (0.0, 2e-3), "bf16": (0.0, 2e-2)}  # out; lse is compared with rtol 1e-4
LARGE = 1000.0
LARGE_TOLERANCE = (2e-3, 2e-3)  # scores ~1e3 in float32 are rounded by ~1e-4, and p = exp2(s - m) with them
NEGATIVE = 100.0  # q . k / sqrt(hs) below -NEGATIVE x (1 + 1) = -200 for every key: exp2 of it is 0 in float32


def _truth(q, k, v, causal):
    """[out, lse] in float64 for (B, nh, T, hs) arrays, every score computed, causal bottom-right."""
    q, k, v = (torch.from_numpy(np.asarray(x, np.float64)) for x in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        t_q, t_k = q.shape[2], k.shape[2]
        scores = scores.masked_fill(~torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q), float("-inf"))
    return [(torch.softmax(scores, -1) @ v).numpy(), torch.logsumexp(scores, -1).numpy()]


def _case(rng, batch, heads, t_q, t_k, hs, causal, dtype, large=False):
    q, k, v = rng.standard_normal((batch, heads, t_q, hs)), *(rng.standard_normal((batch, heads, t_k, hs))
                                                               for _ in range(2))
    if large == "negative":  # every score below -200: keys of positive entries, queries of negative ones
        k = 1 + np.abs(k)
        q = -NEGATIVE * math.sqrt(hs) / hs * (1 + 0.1 * np.abs(q))
    elif large:
        q *= LARGE
        q[:, :, 0] = k[:, :, 0] * (2 * LARGE * math.sqrt(hs) / (k[:, :, 0] ** 2).sum(-1, keepdims=True))  # a 2000
    return {"q": as_sent(q, dtype), "k": as_sent(k, dtype), "v": as_sent(v, dtype), "causal": causal, "dtype": dtype}


def _hint(case, got, expected):
    if not (isinstance(got, list) and len(got) == 2):
        return "The launcher returns [out, lse]: keep it as provided."
    out, lse = got
    if not np.isfinite(out).all():
        return ("inf or NaN: subtract the running max before exp2 (exp overflows float32 past 88.7), start it at "
                "-inf (from 0, a row whose scores are all below -150 gets exp2(s - 0) = 0 everywhere and l_i = 0), "
                "and mask the scores of keys past T_K and (causal) after the query with -inf.")
    rtol, atol = TOLERANCE[case["dtype"]]
    if np.allclose(out, expected[0], rtol=rtol, atol=atol):
        return ("out is right, lse is not: store the natural log-sum-exp (m_i + log2(l_i)) * ln 2; m_i and the "
                "scores are in base-2 units.")
    if case["causal"]:
        return ("Causal: query row r sits at position T_K - T_Q + r and sees key n iff n <= T_K - T_Q + r. Also "
                "rescale acc by alpha = exp2(m_i - m_new) before adding p @ v.")
    return ("When a block raises the row's max, rescale l_i AND acc by alpha = exp2(m_i - m_new); keys past T_K must "
            "score -inf (a masked load gives 0, which exp2 turns into a weight).")


def _attends(student, cases, hidden, large=False):
    """The kernel's [out, lse] on each case against the float64 truth: out within the case's tolerance, lse within
    rtol 1e-4."""
    def compare(got, expected, case):
        rtol, atol = LARGE_TOLERANCE if large else TOLERANCE[case["dtype"]]
        if len(got) != 2:
            raise CheckFailure(f"result: expected [out, lse], got a list of {len(got)}")
        assert_close(got[0], expected[0], rtol=rtol, atol=atol, where="out")
        assert_close(got[1], expected[1], rtol=1e-4, atol=1e-4 if case["dtype"] == "fp32" else 2e-2, where="lse")

    compare_cases(student, "flash_attention", cases, lambda q, k, v, causal, dtype: _truth(q, k, v, causal),
                  returns="list", hidden=hidden, compare=compare, hint=_hint)


@check(points=3)
def flash_forward(student, rng, hidden):
    """The kernel equals softmax attention (out and lse), not causal, on lengths on both sides of a block."""
    if not hidden:
        plan = [(1, 2, 40, 40, 16), (2, 1, 16, 33, 32)]
    else:
        plan = [(1, 1, 1, 1, 16), (1, 2, 15, 17, 16), (2, 1, 16, 16, 32), (1, 1, 33, 7, 16),
                (1, 2, int(rng.integers(2, 60)), int(rng.integers(2, 60)), 32)]
    _attends(student, [_case(rng, *p, False, "fp32") for p in plan], hidden)


@check(points=3)
def flash_forward_causal(student, rng, hidden):
    """The kernel equals causal softmax attention, bottom-right: prefill (Tq == Tk), a decode step and chunks."""
    if not hidden:
        plan = [(1, 2, 40, 40, 16), (1, 2, 1, 23, 16), (1, 1, 10, 37, 32)]
    else:
        plan = [(1, 1, 1, 1, 16), (2, 1, 17, 17, 16), (1, 2, 16, 16, 32), (1, 1, 1, 50, 32), (1, 2, 20, 35, 16)]
        t_q = int(rng.integers(2, 50))
        plan.append((1, 1, t_q, t_q + int(rng.integers(0, 30)), 16))
    _attends(student, [_case(rng, *p, True, "fp32") for p in plan], hidden)


@check(points=2)
def flash_forward_large_logits(student, rng, hidden):
    """The kernel stays finite and right with scores near +-1000 (exp overflows float32 past 88.7), causal or not."""
    if not hidden:
        plan = [(1, 2, 32, 32, 16, True), (1, 1, 16, 32, 16, False)]
    else:
        plan = [(1, 1, 1, 1, 16, True), (1, 2, 48, 48, 32, True), (2, 1, 16, 16, 16, False),
                (1, 1, 20, 37, 16, True)]
    negative = [_case(rng, 1, 1, 20, 37, 16, causal, "fp32", large="negative") for causal in (False, True)]
    _attends(student, [_case(rng, *p, "fp32", large=True) for p in plan] + negative, hidden, large=True)


@check(points=2)
def flash_forward_gpu(student, rng, hidden):
    """On a GPU: bfloat16 and float16, head sizes 64 and 128, causal and not, within SDPA's own error (needs a GPU)."""
    require_gpu()
    if not hidden:
        plan = [(1, 2, 256, 256, 64, True, "bf16"), (1, 2, 300, 300, 128, False, "fp16")]
    else:
        plan = [(2, 4, 1000, 1000, 128, True, "bf16"), (1, 2, 1, 1, 64, True, "fp16"),
                (1, 2, 129, 129, 64, False, "bf16"), (1, 4, 513, 513, 128, True, "fp16"),
                (1, 2, 64, 700, 128, False, "bf16")]
    _attends(student, [_case(rng, *p) for p in plan], hidden)


TILES_T, TILES_HS = 64, 16  # a prefill of 4 x 4 blocks of 16 in the interpreter's launcher


@check(points=2)
def flash_forward_tiles(student, rng, hidden):
    """The kernel passes once over the keys (two tl.dots per key block) and, causal, skips the key blocks past each
    tile's last query (its tl.dot multiply-adds counted in the grader's Triton interpreter)."""
    work = {}
    for causal in (False, True):
        case = _case(rng, 1, 1, TILES_T, TILES_T, TILES_HS, causal, "fp32")
        got, launches = student.profiled_call("flash_attention", returns="list", dialect="triton", **case)
        expected = _truth(case["q"], case["k"], case["v"], causal)
        assert_close(got[0] if len(got) == 2 else got, expected[0], rtol=TOLERANCE["fp32"][0],
                     atol=TOLERANCE["fp32"][1], where=f"out of a {'causal ' * causal}{TILES_T}-token prefill")
        work[causal] = sum(launch["dot_macs"] for launch in launches)
    one_pass = 2 * TILES_T * TILES_T * TILES_HS  # q k^T and p v, each T x T x hs
    if work[False] > one_pass:
        raise CheckFailure(f"flash_attention on a {TILES_T}-token prefill does {work[False] / one_pass:.2g} x the "
                           "tl.dot multiply-adds of one pass over the keys (q k^T and p v once per key block): keep "
                           "a running max and sum and rescale acc as the max grows (the online softmax) instead of "
                           "passing over the keys again.")
    if work[True] > 0.7 * work[False]:
        raise CheckFailure(f"causal flash_attention on a {TILES_T}-token prefill does {work[True] / work[False]:.0%} "
                           "of the non-causal one's tl.dot work: the key blocks past a tile's last query are all "
                           "masked; end the loop at min(T_K, T_K - T_Q + (tile + 1) * BLOCK_M), which about halves "
                           "a prefill's work.")


# Speed, on a GPU ------------------------------------------------------------------------------------------------------
# (imported here, beside the checks they serve; aisys_grader/speed.py says how a kernel is timed, and why it is trusted)
from aisys_grader import speed  # noqa: E402

SPEED_SHAPE = (4, 16, 4096, 64)  # batch, heads, tokens, head size
SPEED_FLOPS = 2 * 2 * math.prod(SPEED_SHAPE[:2]) * SPEED_SHAPE[2] ** 2 * SPEED_SHAPE[3] // 2  # causal: half of QK^T, PV


def _sdpa_with_lse(q, k, v, causal, dtype):
    """[out, lse] on the GPU: torch's attention, and the log-sum-exp of the scores a few heads at a time."""
    batch, heads, tokens, size = q.shape
    scores_of = (q.reshape(batch * heads, tokens, size), k.reshape(batch * heads, tokens, size))
    lse = torch.empty(batch * heads, tokens, dtype=torch.float32, device=q.device)
    masked = torch.ones(tokens, tokens, dtype=torch.bool, device=q.device).triu(1)
    for start in range(0, batch * heads, 8):
        scores = scores_of[0][start:start + 8].float() @ scores_of[1][start:start + 8].float().transpose(1, 2)
        lse[start:start + 8] = torch.logsumexp(scores.masked_fill_(masked, float("-inf")) / math.sqrt(size), -1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return [out, lse.reshape(batch, heads, tokens)]


def _sdpa_limit(outputs):
    def attention(q, k, v, causal, dtype):
        return [torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), outputs[1]]

    return attention


SPEED = speed.Workload(
    "flash_attention", tuple(speed.Input(SPEED_SHAPE, "fp16") for _ in range(3)), args=(True, "fp16"),
    reference=_sdpa_with_lse, rtol=2e-3, limit=speed.Limit("torch's scaled_dot_product_attention", _sdpa_limit),
    work=SPEED_FLOPS, unit="flops", label="causal fp16 attention of 4 x 16 heads, 4096 tokens, head size 64",
    reps=640, floor=0.25,
    hint="Keep q, k and v in fp16 for tl.dot (the Tensor Cores; accumulate in float32), and let a causal tile stop "
         "at its last visible key instead of masking every later block.")


@check(points=1)
def flash_attention_speed(student, rng, hidden):
    """On a GPU: flash_attention, causal fp16 with 4 x 16 heads of 4096 tokens (head size 64), runs at 25% or more
    of the speed of torch's scaled_dot_product_attention.

    Timed by the grader on fresh inputs each repetition, the L2 cache cleared in between, against torch's attention
    in the same run (aisys_grader/speed.py). Without a GPU it is skipped and the notebook graded without it."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.25)


@check(points=1)
def flash_attention_near_sdpa_speed(student, rng, hidden):
    """On a GPU: flash_attention, causal fp16 with 4 x 16 heads of 4096 tokens (head size 64), runs at 50% or more
    of the speed of torch's scaled_dot_product_attention."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.5)
