"""Checks: INT4 packing (both nibble orders) and the W4A16 GEMV kernel.

Expected values come from aisys.quant.int4. pack and unpack are compared bit for bit, with the dtype the notebook
states (int32 words, uint8 codes), on both orders; every seed holds the deterministic cases that catch the usual
mistakes: codes 0..7 in one word (the order, and a reversed one), a 15 in the top nibble (a negative word: the sign
bit), a word of all 15s (-1), the words 0x80000000 and 0x7FFFFFFF. pack must raise ValueError for K not a multiple
of 8 (the message naming K) and for codes outside [0, 15] (naming q), read through the notebook's pack_error, which
returns the exception's type and message: judged always, quoted only where the grader shows messages.

The GEMV runs the student's kernel in Triton's interpreter (tiles of 16 outputs by 64 inputs): ragged N and K (a
partial tile of each), M of 1, 3 and 16, group sizes from 8 to 128 with several groups per row, zero points across
[0, 15], x in float32 and float16. It is compared with x @ W.T in float64, within the float32 summation bound
(K + 2) u sum_k |x w| (u = 2**-24; Higham, Accuracy and Stability of Numerical Algorithms, section 3.1), plus half
an ulp of float16 when y is float16. `gemv_reads_packed` runs it again in the grader's interpreter (the clean room)
and counts the elements its loads read from `w_ptr`: exactly N x K / 8, each packed word once.
"""

import re

import numpy as np

from aisys.quant import int4 as reference
from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, describe, exception_name, shown, unredacted
from aisys_grader.low_precision import as_sent

ORDERS = ("sequential", "awq")
UNIT = 2.0**-24  # float32's unit roundoff: the kernel accumulates in float32
HALF_ULP_FP16 = 2.0**-11  # relative rounding of the float16 result


def _codes(rng, n, k):
    return rng.integers(0, 16, (n, k)).astype(np.int64)


def _fixed_codes():
    """Codes 0..7 (the order shows), a 15 on top (a negative word), all 15s (-1), 8 on top only (INT32_MIN)."""
    return np.array([[0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 15],
                     [15] * 8 + [0, 0, 0, 0, 0, 0, 0, 8],
                     [15, 14, 13, 12, 11, 10, 9, 8, 3, 0, 0, 0, 0, 0, 0, 12]], dtype=np.int64)


def _pack_hint(case, got, expected):
    if not isinstance(got, np.ndarray) or got.dtype != np.int32:
        return "Return int32 words: view the low 32 bits as int32 (.astype(np.uint32).view(np.int32))."
    other = "awq" if case["order"] == "sequential" else "sequential"
    if got.shape == expected.shape and np.array_equal(got, reference.pack(case["q"], other)):
        return f"Those are the words of the {other} order."
    return ("Element j of a word sits at bits 4j (sequential) or at nibble j // 2 + 4 (j % 2) (awq), element 0 in the "
            "LOW bits; a 15 in the top nibble makes the int32 negative, by wrapping, not by saturating.")


def _unpack_hint(case, got, expected):
    if isinstance(got, np.ndarray) and got.size and got.dtype.kind in "iu":
        if got.min() < 0 or got.max() > 15:
            return ("Codes outside [0, 15]: mask each shifted word with 0xF (an int32 shifted right keeps filling "
                    "with its sign bit).")
    return "Element j of a word sits at bits 4j (sequential) or at nibble j // 2 + 4 (j % 2) (awq)."


def _raises(student, case, argument):
    """pack(**case) raises ValueError whose message names `argument` (read through the notebook's pack_error, which
    returns it: the message is judged, and shown only outside redacted())."""
    call = f"pack({', '.join(f'{k}={describe(v)}' for k, v in case.items())})"
    got = student.call("pack_error", returns="any", **case)
    if got is None:
        raise CheckFailure(f"{call} returned; it should raise ValueError naming {argument}")
    if not (isinstance(got, list) and len(got) == 2 and all(isinstance(part, str) for part in got)):
        raise CheckFailure("pack_error should return [type, message] or None: keep it as provided")
    kind, message = got
    said = unredacted(f" ({kind}: {message!r})")
    if kind != "ValueError":
        raise CheckFailure(f"{call} raised {exception_name(kind)}{said}; it should raise ValueError naming {argument}")
    if not re.search(rf"\b{argument}\b", message):
        raise CheckFailure(f"{call} raised ValueError{said}, but its message should name the argument {argument} "
                           f"(the word {argument} in it) and say what was expected")


@check(points=1)
def pack_rejects(student, rng, hidden):
    """pack raises ValueError naming K when K is not a multiple of 8, and naming q for a code outside [0, 15]."""
    for k in (12, 1, 20):
        _raises(student, {"q": np.ones((2, k), np.int64), "order": "sequential"}, "K")
    for code in (16, -1):
        q = np.zeros((2, 16), np.int64)
        q[1, 9] = code
        _raises(student, {"q": q, "order": "awq"}, "q")


@check(points=2)
def pack_words(student, rng, hidden):
    """pack(q, order) equals the reference bit for bit, in int32, in both orders, negative words included."""
    cases = [{"q": _fixed_codes(), "order": order} for order in ORDERS]
    if hidden:
        for order in ORDERS:
            cases += [{"q": _codes(rng, int(rng.integers(1, 6)), 8 * int(rng.integers(1, 9))), "order": order},
                      {"q": np.full((1, 8), 15, np.int64), "order": order}]
    compare_cases(student, "pack", cases, reference.pack, returns="array", hidden=hidden, tolerance=(0, 0),
                  dtype="int32", hint=_pack_hint)


@check(points=2)
def unpack_words(student, rng, hidden):
    """unpack(packed, order) equals the reference bit for bit, in uint8, in both orders, for negative words too."""
    edges = np.array([[-1, np.iinfo(np.int32).min, np.iinfo(np.int32).max, 0x76543210]], np.int32)
    cases = [{"packed": reference.pack(_fixed_codes(), order), "order": order} for order in ORDERS]
    cases += [{"packed": edges, "order": order} for order in ORDERS]
    if hidden:
        cases += [{"packed": rng.integers(np.iinfo(np.int32).min, np.iinfo(np.int32).max, (int(rng.integers(1, 6)),
                                                                                            int(rng.integers(1, 9))),
                                          dtype=np.int64).astype(np.int32), "order": order} for order in ORDERS]
    compare_cases(student, "unpack", cases, reference.unpack, returns="array", hidden=hidden, tolerance=(0, 0),
                  dtype="uint8", hint=_unpack_hint)


def _gemv_case(rng, m, n, k, group, order, dtype):
    q = _codes(rng, n, k)
    scales = rng.uniform(0.005, 0.05, (n, k // group)).astype(np.float16)
    zeros = rng.integers(0, 16, (n, k // group)).astype(np.uint8)
    zeros[0, 0], zeros[-1, -1] = 0, 15  # both ends of the zero points' range
    return {"x": as_sent(rng.standard_normal((m, k)), dtype), "packed": reference.pack(q, order), "scales": scales,
            "zeros": zeros, "order": order, "dtype": dtype}


def _expected(x, packed, scales, zeros, order, dtype):
    return reference.gemv(np.asarray(x, np.float64), packed, scales, zeros, order)


def _tolerance(case):
    """(0, atol): float32 summation of K products, (K + 2) u sum |x w|, plus half an fp16 ulp of y if fp16."""
    w = reference.dequantize(reference.unpack(case["packed"], case["order"]), case["scales"], case["zeros"])
    x = np.asarray(case["x"], np.float64)
    magnitude = np.abs(x) @ np.abs(w.astype(np.float64)).T
    atol = (x.shape[1] + 2) * UNIT * magnitude.max()
    if case["dtype"] == "fp16":
        atol += HALF_ULP_FP16 * np.abs(x @ w.astype(np.float64).T).max()
    return 0.0, atol


def _gemv_hint(case, got, expected):
    return ("Check, in turn: the shift of element k % 8 (4 x its nibble: j for sequential, j // 2 + 4 (j % 2) for "
            "awq), the mask 0xF after the shift, (q - z) before * s, and the group k // GROUP_SIZE of the INPUT k "
            "(not of the word index) in a row of K // GROUP_SIZE groups.")


def _gemv(student, cases, hidden):
    compare_cases(student, "w4a16_gemv", cases, _expected, returns="array", hidden=hidden, tolerance=_tolerance,
                  dtype=lambda case: case["dtype"], hint=_gemv_hint)


def _plan(rng, hidden):
    """(M, N, K, G, dtype): ragged N and K (a partial tile of each) and several groups per row on every seed."""
    if not hidden:
        return [(1, 40, 96, 32, "fp32"), (3, 16, 128, 64, "fp16")]
    return [(1, 1, 8, 8, "fp32"), (16, 17, 72, 8, "fp32"), (2, 33, 200, 40, "fp16"), (1, 20, 256, 128, "fp32"),
            (int(rng.integers(1, 17)), int(rng.integers(1, 40)), 64 * int(rng.integers(1, 4)), 16, "fp32")]


@check(points=3)
def gemv(student, rng, hidden):
    """The kernel equals x @ W.T (float64) with sequential words, ragged sizes, several group sizes, M from 1 to 16."""
    _gemv(student, [_gemv_case(rng, *p[:4], "sequential", p[4]) for p in _plan(rng, hidden)], hidden)


@check(points=2)
def gemv_awq(student, rng, hidden):
    """The kernel equals x @ W.T (float64) with words in AWQ's interleaved order."""
    _gemv(student, [_gemv_case(rng, *p[:4], "awq", p[4]) for p in _plan(rng, hidden)], hidden)


READ_PLAN = [(1, 24, 136, 8), (2, 16, 128, 128)]  # (M, N, K, G): ragged N and K, small groups and one large


@check(points=2)
def gemv_reads_packed(student, rng, hidden):
    """The kernel reads each packed word once (N x K / 8 elements from w_ptr, counted in the grader's Triton
    interpreter): no load per nibble, no dequantized copy of W."""
    for m, n, k, group in READ_PLAN:
        case = _gemv_case(rng, m, n, k, group, "sequential", "fp32")
        got, launches = student.profiled_call("w4a16_gemv", returns="array", dialect="triton", **case)
        assert_close(got, _expected(**case), rtol=0.0, atol=_tolerance(case)[1], where="y")
        read = sum(launch.get("loaded_from", {}).get("w_ptr", 0) for launch in launches)
        words = n * k // 8
        if read != words:
            more = (f"{read / words:.3g} x" if read else "none of")
            raise CheckFailure(
                f"w4a16_gemv with N = {shown(n)}, K = {shown(k)} read {more} the {words} packed words from w_ptr: "
                "load each (BLOCK_N, BLOCK_K // 8) tile of words once and broadcast each word to its 8 codes in "
                "registers (tl.broadcast_to, tl.reshape); a load per code reads every word 8 times. Keep the "
                "kernel's signature: the words are its argument w_ptr.")
