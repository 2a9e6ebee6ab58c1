"""Checks: rounding to bf16, tf32 and fp16 bit for bit, lost updates,
stagnation, a dot product with a chosen accumulation precision, and predictions of how its error grows.

Every answer is compared with `aisys.mixed_precision` on the same input. Roundings and dot products
must match bit for bit (rtol = atol = 0, NaN matching NaN): the model is exact, so any difference is a
mistake. Hidden rounding cases always include the edges (ties with an even and an odd kept part,
values just either side of a tie, rounding up across an exponent boundary, subnormals, the largest
finite values and the overflow threshold, +-0, +-inf, NaNs whose payload lies only in the dropped
bits), then random bit patterns, which cover every exponent. Hidden dot products cover every realistic
storage/accumulate pair in both orders, lengths 1, 2, 3 and either side of powers of two, data of mixed
and of one sign, a tie, an FP16 overflow and a sum that stagnates. The error bound must equal Higham's
gamma_n and hold on an input built to approach it; the typical error must be within a factor of
TYPICAL_FACTOR of the median error measured on random data.
"""

import functools
import math

import numpy as np

from aisys import mixed_precision as reference

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, describe, redacting, shown, unredacted


DTYPES = ("fp32", "tf32", "bf16", "fp16")
DROPPED_BITS = {"bf16": 16, "tf32": 13}  # float32 fraction bits each format drops
# (storage, accumulate): every 16-bit or TF32 input with every accumulator, and FP32 with FP32. FP32 inputs with a
# narrower accumulator are left out: on the way there, a float32 path would round their 48-bit products twice.
PAIRS = [(s, a) for s in ("fp16", "bf16", "tf32") for a in ("fp16", "bf16", "fp32")] + [("fp32", "fp32")]
EDGE_K = (1, 2, 3, 7, 8, 9, 63, 64, 65, 257, 1000)
TYPICAL_FACTOR = 10  # from K = 64, sqrt(n) u is 1.5 to 6.5 times the measured median and K u 20 or more times
TYPICAL_TRIALS = 128


def _bits(*patterns) -> np.ndarray:
    return np.array(patterns, dtype=np.uint32).view(np.float32)


EDGES = {  # float32 bit patterns at the edges of each format's rounding
    "bf16": _bits(
        0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000,  # ties: kept part even (down) and odd (up), both signs
        0x3F808001, 0x3F807FFF, 0x3F80FFFF,  # either side of a tie
        0x3F7FFFFF, 0x3F7F8000, 0xBF7FC000, 0x407FFFFF,  # rounding up across an exponent boundary
        0x00000001, 0x00008000, 0x00018000, 0x00007FFF, 0x007FFFFF, 0x807F8000, 0x00800000,  # subnormals
        0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7F8000,  # largest bf16, the overflow tie, fp32 max
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # +-0, +-inf
        0x7FC00000, 0x7F800001, 0x7F807FFF, 0x7FFFFFFF, 0xFF800001, 0xFFFFFFFF),  # NaNs, some with low payloads
    "tf32": _bits(
        0x3F801000, 0x3F803000, 0xBF801000, 0x3F801001, 0x3F800FFF,  # ties (even, odd), either side of one
        0x3F7FF000, 0x3F7FFFFF,  # rounding up across an exponent boundary
        0x00000001, 0x00001000, 0x00003000, 0x007FF000,  # subnormals
        0x7F7FF000, 0x7F7FEFFF, 0x7F7FFFFF,  # the overflow tie, just below it, fp32 max
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # +-0, +-inf
        0x7FC00000, 0x7F800001, 0x7F800FFF, 0xFF801FFF),  # NaNs, some with low payloads
    "fp16": np.array([
        65504, 65519.996, 65520, -65520, 1e5,  # the largest value, just below and at the overflow tie, beyond
        6e-8, 2.0**-24, 2.0**-25, 2.0**-25 + 2.0**-40, 3 * 2.0**-25, 2.0**-26,  # subnormals and ties among them
        2.0**-14, 2.0**-14 - 2.0**-25,  # the smallest normal, and a subnormal that rounds up to it
        1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 - 2.0**-12, 2047.0, 2049.0,  # ties above and below 1; around 2048
        0.0, -0.0, np.inf, -np.inf, np.nan], dtype=np.float32),
    "fp32": np.array([1.0, -0.1, 1e-45, 3.4e38, np.inf, np.nan], dtype=np.float32),
}


def _random_floats(rng, n: int) -> np.ndarray:
    """float32 values of every kind: random bit patterns (any exponent, inf, NaN) and normals at random scales."""
    patterns = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = (rng.standard_normal(n) * 2.0 ** rng.integers(-130, 128, n)).astype(np.float32)
    return np.concatenate([patterns, scaled])


def _ties(rng, n: int, dropped: int) -> np.ndarray:
    """float32 values exactly halfway between two neighbours of the format that drops `dropped` bits."""
    kept = rng.integers(0x00800000 >> dropped, 0x7F000000 >> dropped, n, dtype=np.uint64)
    sign = rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(31)
    return (sign | (kept << np.uint64(dropped)) | np.uint64(1 << (dropped - 1))).astype(np.uint32).view(np.float32)


def _hex(value) -> str:
    return f"0x{int(np.asarray(value, np.float32).view(np.uint32)):08X}"


def _rounding_hint(x, got, expected, dtype: str) -> str:
    """What the first wrong element suggests, from its input."""
    if np.isnan(x):
        return ("x is a NaN: adding the rounding increment to its bits can carry out of the fraction (giving inf) "
                "or out of the sign (giving 0). Return NaN for NaN (np.isnan).")
    dropped = DROPPED_BITS.get(dtype)
    if dropped is None:
        return ("fp16: x.astype(np.float16) rounds to nearest even, keeps subnormals and overflows to inf; "
                "fp32: the float32 value itself.")
    bits = int(np.asarray(x, np.float32).view(np.uint32))
    low = bits & ((1 << dropped) - 1)
    got_bits = None if np.isnan(got) else int(np.float32(got).view(np.uint32))
    if got_bits == bits - low and low:
        return (f"That is x with its low {dropped} bits cleared: truncation, which rounds toward zero. Add "
                f"0x{(1 << (dropped - 1)) - 1:X} plus the lowest kept bit before clearing.")
    if low == 1 << (dropped - 1):
        return ("x lies exactly halfway between two neighbours: the tie goes to the one whose last kept bit is 0 "
                "(round half to even); adding half a step alone rounds every tie away from zero.")
    if np.isinf(expected):
        return "x is at least half a step above the largest finite value: it rounds to inf, as in hardware."
    return "Round to nearest on the bit pattern: add half a step minus one plus the lowest kept bit, then clear."


def _roundings(student, function: str, cases: list[dict], hidden: bool) -> None:
    """Each case bit for bit (NaN as NaN) against reference.round_to (bf16 unless the case names a format)."""
    compare_cases(student, function, cases,
                  lambda x, dtype="bf16": np.asarray(reference.round_to(x, dtype), dtype=np.float32),
                  returns="array", hidden=hidden, compare=_same_bits)


def _same_bits(got, expected, case) -> None:
    """CheckFailure unless `got` is float32 with `expected`'s shape and bits (NaN as NaN); it explains the first
    wrong element."""
    if got.shape != expected.shape:
        raise CheckFailure(f"expected an array of x's shape {expected.shape}, got shape {got.shape}")
    if got.dtype != np.float32:
        raise CheckFailure(f"expected float32 values, the format's values carried in float32, got dtype {got.dtype}"
                           + (": convert back with .astype(np.float32)" if got.dtype == np.float16 else ""))
    with np.errstate(invalid="ignore"):  # widening a signalling NaN raises the invalid flag
        g, e = got.astype(np.float64), expected.astype(np.float64)
    wrong = ~((g == e) | (np.isnan(g) & np.isnan(e)))
    if not wrong.any():
        return
    j = np.unravel_index(int(np.argmax(wrong)), wrong.shape)
    x, dtype = case["x"][j], case.get("dtype", "bf16")
    hint = _rounding_hint(x, g[j], e[j], dtype)
    if redacting():  # the input, the rounded value and the student's are the hidden case's
        raise CheckFailure(f"{int(wrong.sum())} of {wrong.size} values differ; first at index {tuple(map(int, j))}. "
                           f"{hint}")
    raise CheckFailure(f"{int(wrong.sum())} of {wrong.size} values differ; at index {tuple(map(int, j))}, "
                       f"x = {float(x)!r} (bits {_hex(x)}) rounds to {float(e[j])!r} (bits {_hex(e[j])}), "
                       f"got {float(g[j])!r}. {hint}")


@check(points=3)
def round_to_bf16(student, rng, hidden):
    """round_to_bf16(x) rounds float32 to bf16 bit for bit: ties to even, subnormals, overflow to inf, NaN kept."""
    if not hidden:
        x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, np.pi, -1e-3, 1e-40, 3.4e38, np.inf, np.nan], dtype=np.float32)
        cases = [{"x": x}]
    else:
        cases = [{"x": EDGES["bf16"]}, {"x": _random_floats(rng, 1000)}, {"x": _ties(rng, 200, 16)},
                 {"x": _random_floats(rng, 6).reshape(3, 4)}, {"x": _random_floats(rng, 1)[:1]}]
    _roundings(student, "round_to_bf16", cases, hidden)


@check(points=2)
def round_to(student, rng, hidden):
    """round_to(x, dtype) rounds float32 to fp32, tf32, bf16 or fp16 bit for bit."""
    if not hidden:
        x = np.array([1.0, 1 + 2**-11, 1 + 3 * 2**-11, 0.1, -2.5e-6, 7e4, np.inf], dtype=np.float32)
        cases = [{"x": x, "dtype": dtype} for dtype in DTYPES]
    else:
        cases = []
        for dtype in DTYPES:
            cases += [{"x": EDGES[dtype], "dtype": dtype}, {"x": _random_floats(rng, 500), "dtype": dtype}]
        cases += [{"x": _ties(rng, 100, DROPPED_BITS[d]), "dtype": d} for d in DROPPED_BITS]
    _roundings(student, "round_to", cases, hidden)


def _lost_update_cases(rng, dtype: str) -> list[tuple[dict, str]]:
    """(case, what it tests): updates at, above and below half the spacing at w, for even and odd w."""
    p = reference.FORMATS[dtype].precision
    e = int(rng.integers(-6, 7))
    odd = 2.0**e * (1 + 2.0 ** (1 - p) * (2 * int(rng.integers(1, 2 ** (p - 3))) + 1))  # odd last significand bit
    even = odd + 2.0 ** (e + 1 - p)
    half = 2.0 ** (e - p)  # half the spacing of dtype's values in [2^e, 2^(e+1))
    power = 2.0**e  # below a power of two the spacing halves
    little = 2.0 ** -int(rng.integers(2, 5))
    sign = float(rng.choice([-1.0, 1.0]))
    plan = [
        (even, half, "update is exactly half the spacing and w's significand is even: the tie stays at w"),
        (odd, half, "update is exactly half the spacing and w's significand is odd: the tie leaves w"),
        (even, half * (1 + little), "update is just over half the spacing: w + update rounds away from w"),
        (odd, half * (1 - little), "update is just under half the spacing: w + update rounds back to w"),
        (power, -half / 2, "just below a power of two the spacing is half as large: -spacing/4 there is a tie, "
                           "and the power of two is the even neighbour"),
        (power, -half / 2 * (1 + little), "just below a power of two the spacing is half as large: this update, "
                                          "under half the spacing above w, is over half the spacing below"),
        (-odd, -half, "a negative w and an update of its sign: the same tie as for +w"),
        (sign * even, 0.0, "adding 0 changes nothing"),
    ]
    return [({"w": w, "update": update, "dtype": dtype}, why) for w, update, why in plan]


LOST_UPDATE_EXTREMES = [  # the largest finite value of each 16-bit format: its odd significand ties up, to inf
    ({"w": 65504.0, "update": 16.0, "dtype": "fp16"},
     "w is the largest finite value and the update half the spacing there: the tie goes to the even neighbour, which "
     "lies past the format's range, so w + update is inf, not w"),
    ({"w": float(_bits(0x7F7F0000)[0]), "update": 2.0**119, "dtype": "bf16"},
     "w is the largest finite value and the update half the spacing there: the tie goes to the even neighbour, which "
     "lies past the format's range, so w + update is inf, not w"),
]


@check(points=1)
def lost_update(student, rng, hidden):
    """lost_update(w, update, dtype) says whether w + update rounds back to w: the seed's 2^-3 + 2^-14 in fp16."""
    if not hidden:
        cases = [({"w": 2.0**-3, "update": 2.0**-14, "dtype": "fp16"}, "the seed's example"),
                 ({"w": 2.0**-3, "update": 2.0**-14, "dtype": "fp32"}, "FP32 master weights"),
                 ({"w": 2.0**-3, "update": 2.0**-13, "dtype": "fp16"}, "a whole spacing")]
    else:
        cases = [case for dtype in DTYPES for case in _lost_update_cases(rng, dtype)] + LOST_UPDATE_EXTREMES
    for i, (case, why) in enumerate(cases, 1):
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}"
        arguments = [f"{k}={v!r}" if k == "dtype" else f"{k}={shown(v, '!r')}" for k, v in case.items()]
        call = f"lost_update({', '.join(arguments)})"
        try:
            got = student.call("lost_update", returns="boolean", **case)
        except CheckFailure as failure:
            raise CheckFailure(f"{label}: {call}: {failure}") from None
        try:
            assert_close(got, reference.lost_update(**case))
        except CheckFailure as failure:
            dtype = case["dtype"]
            sums = [(np.array([value]), dtype) for value in (case["w"], case["update"], case["w"] + case["update"])]
            raise CheckFailure(f"{label}: {call}: {failure}. Here {why}. "
                               f"{_round_to_blamed(student, 'lost_update', sums)}".rstrip()) from None


@check(points=1)
def stagnation(student, rng, hidden):
    """stagnation(dtype) is the first n with n + 1 == n: 2^p, where fp16 accumulation of ones stops."""
    for dtype in (DTYPES if hidden else ("fp16",)):
        expected = reference.stagnation(dtype)
        try:
            got = student.call("stagnation", returns="integer", dtype=dtype)
        except CheckFailure as failure:
            raise CheckFailure(f"stagnation(dtype={dtype!r}): {failure}") from None
        if got != expected:
            p = reference.FORMATS[dtype].precision
            hint = (" 2^(mantissa bits) misses the implicit leading 1: p = mantissa bits + 1."
                    if got == 2 ** (p - 1) else
                    " At n = 2^p, n + 1 is already a tie between n and n + 2, which rounds to n (even)."
                    if got == 2**p + 1 else "")
            differs = unredacted(f"expected {expected}, got {got!r}", "differs from the reference")
            raise CheckFailure(f"stagnation(dtype={dtype!r}): {differs}.{hint}")


def _dot_inputs(rng, K: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    if kind == "mixed signs":
        a, b = rng.standard_normal(K) * 4, rng.standard_normal(K)
    elif kind == "one sign":
        a, b = rng.random(K), rng.random(K) * 8
    else:  # "wide range": magnitudes over 2^-6 .. 2^6, where fp16's and bf16's roundings differ the most
        a = rng.standard_normal(K) * 2.0 ** rng.integers(-6, 7, K)
        b = rng.standard_normal(K) * 2.0 ** rng.integers(-6, 7, K)
    return a.astype(np.float32), b.astype(np.float32)


SPECIAL_DOTS = [  # (a, b, storage, accumulate, order, what it shows)
    (np.ones(3000, np.float32), np.ones(3000, np.float32), "fp16", "fp16", "sequential",
     "a running sum of ones in fp16 stops at 2048"),
    (np.ones(300, np.float32), np.ones(300, np.float32), "bf16", "bf16", "pairwise", "pairwise, no sum stagnates"),
    (np.array([1, 2**-8], np.float32), np.ones(2, np.float32), "bf16", "bf16", "sequential",
     "1 + 2^-8 is a tie in bf16"),
    (np.full(4, 300, np.float32), np.full(4, 300, np.float32), "fp16", "fp16", "pairwise",
     "products of 90000 overflow fp16"),
    (np.full(4, 300, np.float32), np.full(4, 300, np.float32), "fp16", "fp32", "sequential",
     "the same products fit fp32"),
]


def _round_to_blamed(student, function: str, roundings: list[tuple[np.ndarray, str]]) -> str:
    """'' unless the student's round_to is wrong on one of these (values, dtype): then that it is the cause."""
    for x, dtype in roundings:
        try:
            assert_close(student.call("round_to", returns="array", x=x, dtype=dtype),
                         np.asarray(reference.round_to(x, dtype), dtype=np.float32), rtol=0, atol=0)
        except CheckFailure:
            return (f"Your round_to is wrong on some of the values this case rounds to {dtype}, and {function} rounds "
                    "with it: fix round_to first (its check says how).")
    return ""


def _dot_hint(student, case: dict, got: float) -> str:
    """Which slip would give `got`, tried one by one with the reference, after the student's round_to."""
    a, b, storage, accumulate, order = (case[k] for k in ("a", "b", "storage", "accumulate", "order"))
    products = (np.asarray(reference.round_to(a.astype(np.float64), storage), np.float64)
                * reference.round_to(b.astype(np.float64), storage))
    if blamed := _round_to_blamed(student, "dot", [(a, storage), (b, storage), (products, accumulate)]):
        return blamed

    def same(value) -> bool:
        return value == got or (math.isnan(value) and math.isnan(got))

    exact = math.fsum(products)
    if storage != accumulate and same(reference.dot(a, b, storage, storage, order)):
        return (f"That is a sum kept in the storage format, {storage}: round each product and partial sum to "
                f"{accumulate}, the accumulator's format (Tensor Cores add FP16 products in FP32).")
    if accumulate != "fp32" and (same(reference.dot(a, b, storage, "fp32", order))
                                 or same(float(reference.round_to(exact, accumulate)))):
        return (f"That is a sum kept in a wider format: round every product and every partial sum to {accumulate}, "
                "not only the result.")
    if same(reference.dot(a, b, storage, accumulate, "pairwise" if order == "sequential" else "sequential")):
        return "That is the other order: 'sequential' keeps one running sum, 'pairwise' adds neighbours level by level."
    if storage != "fp32" and same(reference.dot(a, b, "fp32", accumulate, order)):
        return f"Round a and b to {storage} before multiplying."
    return (f"Round a and b to {storage}, each product to {accumulate}, then each partial sum to {accumulate} "
            "(form them in float64 and round with your round_to). Check round_to first.")


@check(points=3)
def dot(student, rng, hidden):
    """dot(a, b, storage, accumulate, order) matches the reference bit for bit for every pair and both orders."""
    if not hidden:
        a, b = _dot_inputs(rng, 100, "mixed signs")
        plan = [SPECIAL_DOTS[0][:5], (a, b, "fp16", "fp32", "sequential"),
                (*_dot_inputs(rng, 7, "one sign"), "bf16", "bf16", "pairwise")]
    else:
        kinds = ("mixed signs", "one sign", "wide range")
        plan, n = [], 0
        for storage, accumulate in PAIRS:
            for order in reference.ORDERS:
                K = EDGE_K[n % len(EDGE_K)] if n < len(EDGE_K) else int(rng.integers(1, 600))
                plan.append((*_dot_inputs(rng, K, kinds[n % len(kinds)]), storage, accumulate, order))
                n += 1
        plan += [special[:5] for special in SPECIAL_DOTS]
    for i, (a, b, storage, accumulate, order) in enumerate(plan, 1):
        case = {"a": a, "b": b, "storage": storage, "accumulate": accumulate, "order": order}
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(plan)}"
        call = f"dot({', '.join(f'{k}={describe(v)}' for k, v in case.items())})"
        try:
            got = student.call("dot", returns="number", **case)
        except CheckFailure as failure:
            raise CheckFailure(f"{label}: {call}: {failure}") from None
        try:
            assert_close(got, reference.dot(a, b, storage, accumulate, order), rtol=0, atol=0)
        except CheckFailure as failure:
            raise CheckFailure(f"{label}: {call} (K = {a.size}): {failure}. {_dot_hint(student, case, got)}") from None


@functools.lru_cache(maxsize=256)  # the same K and format come back in every grading
def _near_worst_case(K: int, accumulate: str) -> float:
    """The relative error of 1 + t + ... + t (K terms) with t just over half the spacing after 1.

    Each addition rounds up by almost half a spacing, the same way every time: the error
    approaches K u / (1 + K u), close to the bound gamma_K for K u small.
    """
    u = reference.unit_roundoff(accumulate)
    terms = np.full(K, u * (1 + 2 * u))
    terms[0] = 1.0
    exact = math.fsum(terms)
    return abs(reference.rounded_sum(terms, accumulate) - exact) / exact


@check(points=2)
def error_bound(student, rng, hidden):
    """error_bound(K, accumulate, order) is gamma_n = n u / (1 - n u), and holds on a near-worst-case input."""
    if not hidden:
        plan = [(100, "fp16", "sequential"), (1024, "fp16", "pairwise"), (4096, "fp32", "sequential")]
    else:
        plan = [(2047, "fp16", "sequential"), (2048, "fp16", "sequential"), (256, "bf16", "sequential"),
                (3000, "tf32", "pairwise"), (1, "fp32", "sequential")]
        plan += [(K, accumulate, order) for K in (1, 2, 3, 4, 5, 1023, 1024, 1025)
                 for accumulate, order in (("bf16", "sequential"), ("fp16", "pairwise"))]
        plan += [(int(rng.integers(2, 2000)), str(rng.choice(DTYPES)), str(rng.choice(reference.ORDERS)))
                 for _ in range(6)]
    for i, (K, accumulate, order) in enumerate(plan, 1):
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(plan)}"
        call = f"error_bound(K={describe(K)}, accumulate={accumulate!r}, order={order!r})"
        got = student.call("error_bound", returns="number", K=K, accumulate=accumulate, order=order)
        expected = reference.error_bound(K, accumulate, order)
        n, u = reference.roundings(K, order), reference.unit_roundoff(accumulate)
        if order == "sequential" and 2 <= K <= 4096 and (measured := _near_worst_case(K, accumulate)) > got:
            raise CheckFailure(
                f"{label}: {call}" + unredacted(f" = {got!r}", ": the bound") + ", but a sum of 1 and "
                + unredacted(f"{K - 1} terms", "K - 1 terms") + " just over half the spacing after 1 errs by "
                + unredacted(f"{measured:.3g}", "more") + ": a bound must hold for every input. sqrt(n) u is the "
                "typical size of random rounding errors; when they all err the same way they add up to n u.")
        if math.isinf(expected) and not math.isinf(got):
            raise CheckFailure(f"{label}: {call}: n u" + unredacted(f" = {n * u:g}") + " >= 1, where gamma_n is "
                               f"meaningless: return math.inf, got {shown(got, '!r')}.")
        try:
            assert_close(got, expected, rtol=1e-9, atol=0)
        except CheckFailure as failure:
            if math.isclose(got, n * u):
                hint = " gamma_n = n u / (1 - n u), not n u."
            elif math.isclose(got, math.sqrt(n) * u):
                hint = " sqrt(n) u is the typical size of random rounding errors, not a bound for every input."
            else:
                hint = f" Each product passes through n{unredacted(f' = {n}')} roundings here" + (
                    " (ceil(log2 K) levels of the tree, plus its own)." if order == "pairwise" else ".")
            raise CheckFailure(f"{label}: {call}: {failure}.{hint}") from None


@functools.lru_cache(maxsize=64)  # a grading seed gives the same measurements to every notebook graded with it
def _measured_errors(Ks: tuple, storage: str, accumulate: str, order: str, seed: int) -> tuple:
    return tuple(reference.measured_errors(Ks, storage, accumulate, order, "random", TYPICAL_TRIALS, seed))


@check(points=2)
def typical_error(student, rng, hidden):
    """typical_error(K, accumulate, order) is within a factor of 10 of the median error measured on random data."""
    plan = [("fp16", "fp16", (64, 256, 2048))]
    if hidden:
        plan = [(storage, accumulate, (*sorted(int(K) for K in rng.choice([64, 128, 256, 512, 1024], 2, replace=False)),
                                       4096))  # at 4096 every order's n tells sqrt(n) from n and from sqrt(K)
                for storage, accumulate in (("fp16", "fp16"), ("bf16", "bf16"), ("fp16", "fp32"))]
    for storage, accumulate, Ks in plan:
        for order in reference.ORDERS:
            seed = int(rng.integers(2**31))
            measured = _measured_errors(Ks, storage, accumulate, order, seed)
            for K, median in zip(Ks, measured):
                call = f"typical_error(K={describe(K)}, accumulate={accumulate!r}, order={order!r})"
                got = student.call("typical_error", returns="number", K=K, accumulate=accumulate, order=order)
                if not median / TYPICAL_FACTOR <= got <= median * TYPICAL_FACTOR:
                    raise CheckFailure(
                        f"{call}" + unredacted(f" = {got!r}") + f", but the median relative error of {TYPICAL_TRIALS} "
                        f"dot products of standard normal {storage} data is "
                        + unredacted(f"{median:.3g}: ", "") + f"more than {TYPICAL_FACTOR} times off"
                        + unredacted("", " from it") + ". " + _typical_hint(K, accumulate, order, got))


def _typical_hint(K: int, accumulate: str, order: str, got: float) -> str:
    n, u = reference.roundings(K, order), reference.unit_roundoff(accumulate)
    where = unredacted(f"Here n = {n} roundings and ", "Here ") + f"u = 2^{round(math.log2(u))}. "
    if math.isclose(got, n * u, rel_tol=0.01) or math.isclose(got, K * u, rel_tol=0.01):
        return where + ("n u is the worst case, where all the roundings err the same way; random rounding errors "
                        "add like a random walk.")
    if order == "pairwise" and math.isclose(got, math.sqrt(K) * u, rel_tol=0.01):
        return where + "In a pairwise tree each product passes through ceil(log2 K) + 1 roundings, not K."
    return where + "n rounding errors of random sign, each up to u, add like a random walk."
