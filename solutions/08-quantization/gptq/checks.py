"""Checks: GPTQ on one layer (aisys.quant.gptq, after IST-DASLab/gptq's gptq.py and quant.py).

`hessian` on batches of unequal sizes (so averaging per-batch Hessians is wrong) and 3-D batches;
`hessian_inverse_factor` on dead columns, a singular H (fewer calibration rows than features: only the
dampening makes it factor) and float32 input. `gptq` against the reference without groups or act_order, on
independent, correlated (a few hidden factors) and random-walk inputs, 2 to 8 bits; then one check per lesson:
the same result for block sizes 1, 7 and 128 (lazy batch updates change the order of the sums, not the result),
a Hessian-weighted error at most half of round-to-nearest's on correlated inputs, dead columns (zero, no NaN),
act_order's permutation undone, and groups chosen from the current weights, with and without act_order.

Every deciding case is deterministic (its own fixed generator), so each known-wrong answer fails the same checks
on every seed; the hidden runs add cases from the seed.
"""

import numpy as np

from aisys.quant import gptq as reference

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, assert_format, shown, unredacted

# The result is float32: an implementation doing the same float64 arithmetic in another order agrees with the
# reference to a float32 rounding or two (a scale is rounded to float32 from a float64 range whose last bits may
# differ). A different rounding decision for one weight moves it by a whole step, at least range / 255 ~ 1e-2 of
# the row's range, three orders above this tolerance.
TOLERANCE = (1e-5, 1e-6)
# H = 2 X^T X / n summed in any order: each entry's rounding error is below ~n * 2**-52 times the largest diagonal
# entry (|H_ij| <= sqrt(H_ii H_jj)), n <= 200 rows here: 1e-12 of the largest diagonal, 1e-10 relative, with margin.
def _hessian_tolerance(case) -> tuple[float, float]:
    largest = max(float(np.max(2 * np.mean(np.asarray(b, np.float64) ** 2, axis=tuple(range(np.ndim(b) - 1)))))
                  for b in case["batches"])
    return 1e-10, 1e-12 * largest
# U from the damped H, whose condition number is at most 1 + 100 d (the dampening, 1 % of the mean diagonal, is
# below every eigenvalue's shift): any stable route (cholesky then a triangular inverse, or inv then cholesky)
# agrees to ~1e-11 here (d <= 64); an undamped or un-inverted factor is off by orders of magnitude.
FACTOR_TOLERANCE = (1e-7, 1e-9)
# GPTQ's Hessian-weighted error must be at most this fraction of round-to-nearest's on the fixed correlated cases;
# the reference reaches 0.16 at most on them: generous, yet RTN itself (1.0) and a factor of H instead of H^-1
# (several times RTN's) fail. GPTQ is greedy, so this is no theorem per case: on the hidden cases drawn from the
# seed (16 to 32 rows) the reference's ratio reached 0.45 at most over 2000 seeds (median 0.09), so those ask only
# for at most round-to-nearest's error (BEATS_DRAWN). On independent inputs GPTQ gains only a few percent and was
# above RTN on about 1 in 100 random layers: no such case here.
BEATS = 0.5
BEATS_DRAWN = 1.0


def _inputs(g: np.random.Generator, n: int, d: int, kind: str) -> np.ndarray:
    """Calibration inputs (n, d): independent features of unequal scales, a few hidden factors plus noise (strongly
    correlated), or random walks along the features (each correlated with its neighbours)."""
    if kind == "independent":
        return g.standard_normal((n, d)) * g.uniform(0.3, 3.0, d)
    if kind == "factors":
        return g.standard_normal((n, 4)) @ g.standard_normal((4, d)) + 0.1 * g.standard_normal((n, d))
    if kind == "walk":
        return np.cumsum(g.standard_normal((n, d)), axis=1) / np.sqrt(np.arange(1, d + 1))
    raise ValueError(kind)


def _case(g, rows, d, kind, bits, n=None, dead=(), **options) -> dict:
    """A gptq case: weight (rows, d) ~ N(0, 1), H from n calibration rows of `kind`, features in `dead` all 0."""
    X = _inputs(g, n or 4 * d, d, kind)
    X[:, list(dead)] = 0.0
    return {"weight": g.standard_normal((rows, d)), "H": reference.hessian([X]), "bits": bits, **options}


def _call(case) -> str:
    options = ", ".join(f"{k}={shown(v, '!r')}" for k, v in case.items() if k not in ("weight", "H"))
    return f"gptq(weight of shape {case['weight'].shape}, H, {options})"


def _compare_gptq(student, cases, hidden, hint):
    compare_cases(student, "gptq", cases, reference.gptq, returns="array", hidden=hidden, tolerance=TOLERANCE,
                  dtype="float32", hint=hint, call=_call)


# --- hessian --------------------------------------------------------------------------------------------------------

def _hessian_hint(case, got, expected):
    return ("H = 2 X^T X / n with X all the batches' rows stacked and n their total number: with batches of unequal "
            "sizes, the mean of per-batch Hessians weighs a short batch's rows more. Flatten leading axes to rows.")


@check(points=1)
def hessian(student, rng, hidden):
    """hessian(batches) is 2 X^T X / n over every row of every batch, leading axes flattened, in float64."""
    g = np.random.default_rng(20)
    cases = [{"batches": [g.standard_normal((5, 4)), g.standard_normal((2, 4))]},
             {"batches": [g.standard_normal((2, 3, 6)), g.standard_normal((1, 6))]}]
    if hidden:
        cases = [{"batches": [rng.standard_normal((1, 3))]},
                 {"batches": [rng.standard_normal((int(rng.integers(1, 40)), 16)) for _ in range(5)]},
                 {"batches": [rng.standard_normal((2, 8, 12)).astype(np.float32),
                              rng.standard_normal((1, 3, 12)).astype(np.float32)]},
                 {"batches": [rng.standard_normal((30, 9)) * 100, rng.standard_normal((3, 9))]}]
    compare_cases(student, "hessian", cases, reference.hessian, returns="array", hidden=hidden,
                  tolerance=_hessian_tolerance, dtype="float64", hint=_hessian_hint)


# --- hessian_inverse_factor -----------------------------------------------------------------------------------------

def _factor_case(g, d, kind="factors", n=None, dead=(), percdamp=0.01, dtype=np.float64) -> dict:
    X = _inputs(g, n or 4 * d, d, kind)
    X[:, list(dead)] = 0.0
    return {"H": reference.hessian([X]).astype(dtype), "percdamp": percdamp}


def _factor_hint(case, got, expected):
    if isinstance(got, np.ndarray) and np.isnan(got).any():
        return "NaN: H is singular here (fewer calibration rows than features); the dampening makes it definite."
    return ("Set H_ii = 1 where H_ii == 0, add percdamp * mean(diag H) to the diagonal, invert, and return the UPPER "
            "Cholesky factor U of the inverse (U^T U = H^-1: np.linalg.cholesky(H_inv).T), not a factor of H.")


@check(points=2)
def inverse_factor(student, rng, hidden):
    """hessian_inverse_factor(H, percdamp) is the upper Cholesky factor of the damped H's inverse, dead columns'
    H_ii set to 1, also for a singular H."""
    g = np.random.default_rng(21)
    cases = [_factor_case(g, 12), _factor_case(g, 16, n=6),  # fewer rows than features: singular
             _factor_case(g, 10, dead=(2, 7))]
    if hidden:
        d = int(rng.integers(8, 48))
        cases = [_factor_case(rng, d, "walk"), _factor_case(rng, d, "independent", percdamp=0.1),
                 _factor_case(rng, 24, n=int(rng.integers(2, 20))),
                 _factor_case(rng, 20, "walk", dead=sorted(rng.choice(20, 3, replace=False).tolist())),
                 _factor_case(rng, 32, dtype=np.float32), _factor_case(rng, 1, "independent")]
    compare_cases(student, "hessian_inverse_factor", cases, reference.hessian_inverse_factor, returns="array",
                  hidden=hidden, tolerance=FACTOR_TOLERANCE, dtype="float64", hint=_factor_hint,
                  call=lambda c: f"hessian_inverse_factor(H of shape {c['H'].shape}, percdamp={shown(c['percdamp'])})")


# --- gptq -----------------------------------------------------------------------------------------------------------

def _gptq_hint(case, got, expected):
    if isinstance(got, np.ndarray) and np.isnan(got).any():
        return "NaN: see the dead columns (H_ii == 0) and the dampening."
    return ("Quantize the columns in order; after column j, spread its error e_j = (w_j - q_j) / U_jj over the later "
            "columns with row j of U (the inverse Hessian's upper Cholesky factor); after a block, update the "
            "columns after it with E @ U[i1:i2, i2:].")


@check(points=2)
def matches_reference(student, rng, hidden):
    """gptq(weight, H, bits) equals the reference without groups or act_order, 2 to 8 bits, on independent,
    correlated and random-walk inputs."""
    g = np.random.default_rng(22)
    cases = [_case(g, 8, 32, "factors", 4), _case(g, 6, 24, "independent", 3)]
    if hidden:
        cases = [_case(rng, 1, 1, "independent", 4), _case(rng, 8, 16, "walk", 2),
                 _case(rng, 4, 48, "factors", 8, percdamp=0.1), _case(rng, 12, 20, "factors", 3, n=12)]
        for _ in range(3):
            cases.append(_case(rng, int(rng.integers(2, 17)), int(rng.integers(8, 65)),
                               str(rng.choice(["independent", "factors", "walk"])), int(rng.integers(2, 9))))
        cases[-1] = {**cases[-1], "weight": cases[-1]["weight"].astype(np.float32)}
    _compare_gptq(student, cases, hidden, _gptq_hint)


def _lazy_cases(g, hidden) -> list[dict]:
    cases = [_case(g, 8, 40, "walk", 3), _case(g, 6, 33, "factors", 4, group_size=8)]
    if hidden:
        cases += [_case(g, 5, int(g.integers(16, 65)), "factors", int(g.integers(2, 9)), act_order=True),
                  _case(g, 4, 30, "walk", 2, group_size=int(g.integers(3, 13)), act_order=bool(g.integers(2)))]
    return cases


@check(points=2)
def lazy_blocks(student, rng, hidden):
    """gptq gives the same result for block_size 1, 7 and 128 (and others): lazy batch updates change the order of
    the sums, not the result (the paper's sec. 4, step 2)."""
    cases = _lazy_cases(np.random.default_rng(23), False) + (_lazy_cases(rng, True) if hidden else [])
    sizes = [1, 7, 128] + ([int(rng.integers(2, 20)), 5] if hidden else [])
    for i, case in enumerate(cases, 1):
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}: {_call(case)}"
        one_block = student.call("gptq", returns="array", **{**case, "block_size": case["weight"].shape[1]})
        assert_format(one_block, "float32", where=f"{label}, one block")
        if np.isnan(one_block).any():
            raise CheckFailure(f"{label}: the result holds NaN")
        for size in sizes:
            got = student.call("gptq", returns="array", **{**case, "block_size": size})
            try:
                assert_close(got, one_block, rtol=TOLERANCE[0], atol=TOLERANCE[1],
                             where=f"block_size={size} against one block")
            except CheckFailure as failure:
                raise CheckFailure(
                    f"{label}: {failure}. The result must not depend on block_size: after each block, every later "
                    "column still owes the block's updates, W[:, i2:] -= E @ U[i1:i2, i2:]; and a group that starts "
                    "inside a block takes its parameters from weights with the block's updates so far.") from None


def _correlated_cases(g, hidden) -> list[dict]:
    cases = [_case(g, 16, 32, "factors", 4), _case(g, 12, 24, "walk", 2), _case(g, 8, 48, "factors", 8),
             _case(g, 16, 32, "walk", 3, act_order=True), _case(g, 8, 32, "factors", 3, act_order=True)]
    if hidden:
        cases = [_case(g, int(g.integers(16, 33)), int(g.integers(16, 65)), str(g.choice(["factors", "walk"])),
                       int(g.integers(2, 9)), act_order=bool(g.integers(2))) for _ in range(3)]
    return cases


@check(points=2)
def beats_round_to_nearest(student, rng, hidden):
    """On correlated inputs, gptq's Hessian-weighted error tr((W - Q) H (W - Q)^T) is at most half of
    round-to-nearest's (same quantizer, no error feedback) on fixed cases, and at most RTN's on drawn ones."""
    fixed = _correlated_cases(np.random.default_rng(24), False)
    cases = fixed + (_correlated_cases(rng, True) if hidden else [])
    for i, case in enumerate(cases, 1):
        bound = BEATS if i <= len(fixed) else BEATS_DRAWN
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}: {_call(case)}"
        got = student.call("gptq", returns="array", **case)
        assert_format(got, "float32", where=label)
        if not isinstance(got, np.ndarray) or got.shape != case["weight"].shape or not np.isfinite(got).all():
            raise CheckFailure(f"{label}: expected a finite array of shape {case['weight'].shape}")
        error = reference.hessian_error(case["weight"], got, case["H"])
        nearest = reference.hessian_error(case["weight"], reference.round_to_nearest(
            case["weight"], bits=case["bits"]), case["H"])
        if error > bound * nearest:
            ratio = unredacted(f" ({error / nearest:.3g} of it)")
            raise CheckFailure(f"{label}: the Hessian-weighted error is above {bound:g} of round-to-nearest's{ratio}. "
                               "On correlated inputs, feeding each column's error into the later columns (through "
                               "H^-1, not H) lets them cancel most of it.")


@check(points=1)
def dead_columns(student, rng, hidden):
    """An input feature that is 0 on every calibration row (H_ii == 0): its weight column becomes 0, the rest equal
    the reference, no NaN."""
    g = np.random.default_rng(25)
    cases = [_case(g, 8, 16, "factors", 4, dead=(3,)), _case(g, 6, 20, "walk", 3, dead=(0, 9, 19))]
    if hidden:
        d = int(rng.integers(8, 40))
        cases = [_case(rng, 5, d, "factors", int(rng.integers(2, 9)),
                       dead=sorted(rng.choice(d, int(rng.integers(1, 4)), replace=False).tolist())),
                 _case(rng, 4, 12, "independent", 4, dead=tuple(range(11)))]

    def hint(case, got, expected):
        if isinstance(got, np.ndarray) and np.isnan(got).any():
            return "NaN: a dead column has H_ii = 0; set H_ii = 1 and W[:, i] = 0 before anything else."
        return "A dead column (H_ii == 0) multiplies an input that is always 0: set H_ii = 1 and W[:, i] = 0 first."
    _compare_gptq(student, cases, hidden, hint)


def _order_hint(case, got, expected):
    return ("With act_order, quantize the columns by decreasing H_ii (np.argsort(-np.diag(H), kind='stable'), after "
            "the dead columns' fix), permuting W's columns and H's rows and columns, then put the result's columns "
            "back in the layer's order (Q[:, np.argsort(order)]).")


@check(points=2)
def act_order(student, rng, hidden):
    """With act_order=True the columns are quantized by decreasing H_ii and the result is in the layer's own column
    order."""
    g = np.random.default_rng(26)
    cases = [_case(g, 8, 24, "independent", 4, act_order=True), _case(g, 6, 32, "factors", 3, act_order=True)]
    if hidden:
        cases = [_case(rng, int(rng.integers(2, 17)), int(rng.integers(8, 65)),
                       str(rng.choice(["independent", "factors", "walk"])), int(rng.integers(2, 9)), act_order=True)
                 for _ in range(4)]
    _compare_gptq(student, cases, hidden, _order_hint)


@check(points=2)
def groups(student, rng, hidden):
    """With group_size, each group's parameters come from its current (updated) weights when it starts; with
    act_order, groups are consecutive in the permuted order."""
    g = np.random.default_rng(27)
    cases = [_case(g, 8, 32, "factors", 3, group_size=8), _case(g, 8, 32, "walk", 2, group_size=8),
             _case(g, 6, 36, "factors", 4, group_size=16, act_order=True)]  # a shorter last group
    if hidden:
        cases = [_case(rng, 4, 16, "walk", 4, group_size=1),
                 _case(rng, 6, 24, "factors", int(rng.integers(2, 9)), group_size=64),
                 _case(rng, 8, 40, "factors", 3, group_size=int(rng.integers(3, 17)), act_order=True),
                 _case(rng, 5, 30, "independent", 2, group_size=int(rng.integers(3, 17))),
                 _case(rng, 8, 48, "walk", 3, group_size=12, act_order=bool(rng.integers(2)))]

    def hint(case, got, expected):
        return ("A group's parameters come from minmax_params on its columns' CURRENT weights (with every update so "
                "far), chosen when its first column is reached; groups are consecutive in the order of quantization. "
                + (_order_hint(case, got, expected) if case.get("act_order") else ""))
    _compare_gptq(student, cases, hidden, hint)
