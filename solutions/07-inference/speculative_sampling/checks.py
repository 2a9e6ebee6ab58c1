"""Checks: the tokens verify lets through follow the target exactly.

Speculative sampling is right when its output has the target's distribution, so the verify checks
are statistical. The grader draws the drafts from q itself and sends them, thousands of trials at
once, to the notebook's `verify_many` (or `sample_text`), which runs the student's `verify` with a
generator seeded by the grader: reruns are deterministic. Every output is first checked for its
shape (the kept drafts, unchanged, then exactly one new token); then Pearson's chi-square test
(aisys.inference.speculative.goodness_of_fit) compares the counts with the target's law at a
significance of 1e-7, so a correct verify fails a case once in ten million, while the designed
cases (below) are large enough that every typical mistake fails with certainty: the expected
chi-square statistic of each wrong rule exceeds the critical value by more than 6 standard
deviations (tests/test_inference_speculative.py shows the arithmetic for the first token).

Separate checks look at separate laws, so that each mistake is named: the first token
(`first_token`), the number of tokens per pass (`accepted_count`: the acceptance probability
alone), each later position with its own p and q, bonus included (`later_positions`), and the
joint law of three tokens of a bigram model that different passes produced (`generated_text`).
Hidden cases add k = 0 (the bonus only), p == q (all kept), q = 0 where p > 0 and p = 0 where
q > 0, one-hot (greedy) rows, and random pairs over 2 to 8 tokens.
"""

import numpy as np

from aisys.inference.speculative import acceptance_rate as reference_acceptance_rate
from aisys.inference.speculative import expected_accepted as reference_expected_accepted
from aisys.inference.speculative import goodness_of_fit

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, unredacted

SIGNIFICANCE = 1e-7  # a correct verify fails one test in 10^7

# A target p and a draft q with alpha = 0.6 that every typical mistake gets visibly wrong.
P5 = np.array([0.40, 0.25, 0.20, 0.10, 0.05])
Q5 = np.array([0.10, 0.15, 0.20, 0.25, 0.30])
PEAKED = (np.array([0.05, 0.05, 0.10, 0.80]), np.array([0.70, 0.10, 0.10, 0.10]))  # target sure, draft wrong
DISJOINT = (np.array([0.5, 0.5, 0.0, 0.0]), np.array([0.0, 0.2, 0.4, 0.4]))  # q = 0 where p > 0 and back
GREEDY = (np.eye(4)[3], np.eye(4)[1])  # temperature 0: one-hot rows

MISTAKES = ("Typical causes: keeping a draft whenever p(x) >= q(x) instead of with probability min(1, p(x)/q(x)); "
            "the ratio upside down (q/p); drawing the replacement of a rejected draft from target_probs instead "
            "of the residual max(0, p - q), normalised; reading the row of another position.")


# ------------------------------------------------------------------------------------------ cases

def _random_pair(rng, *, min_alpha: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """A random (p, q) over 2 to 8 tokens, sometimes with zeros in p or q; alpha >= min_alpha."""
    while True:
        size = int(rng.integers(2, 9))
        p = rng.dirichlet(np.ones(size))
        if size > 2 and rng.random() < 0.3:
            p[rng.integers(size)] = 0.0  # a token the target rules out
            p /= p.sum()
        t = rng.uniform(0.2, 1 - min_alpha)  # q = (1 - t) p + t r has alpha >= 1 - t
        q = (1 - t) * p + t * rng.dirichlet(np.ones(size))
        if rng.random() < 0.3:
            q[int(np.argmax(p))] = 0.0  # the target's favourite is never drafted
            q /= q.sum()
        if reference_acceptance_rate(p, q) >= min_alpha:
            return p, q


def _permuted(rng, p, q) -> tuple[np.ndarray, np.ndarray]:
    """The same pair with its tokens shuffled: another position's law, with the same alpha."""
    order = rng.permutation(len(p))
    return p[order], q[order]


def _case(pairs: list, bonus: np.ndarray, trials: int) -> dict:
    """A verify case: k = len(pairs) positions, each (p_i, q_i), and the bonus row."""
    q = np.array([q for _, q in pairs]).reshape(len(pairs), len(bonus))  # (0, V) when k = 0
    return {"p": np.stack([p for p, _ in pairs] + [bonus]), "q": q, "trials": trials}


def _same_everywhere(p, q, k: int, trials: int) -> dict:
    return _case([(p, q)] * k, p, trials)


def _label(i: int, count: int, case: dict, hidden: bool) -> str:
    k, size = case["q"].shape[0], case["p"].shape[1]
    return f"{'hidden case' if hidden else 'case'} {i} of {count} (V = {size}, k = {k}, {case['trials']} trials)"


# -------------------------------------------------------------------------------- running verify

def _run_verify(student, case: dict, rng, label: str) -> np.ndarray:
    """The student's outputs on drafts drawn here from q, (trials, k + 1) padded with -1, checked for shape."""
    q, p, trials = case["q"], case["p"], case["trials"]
    k, size = q.shape
    drafts = np.array([rng.choice(size, size=trials, p=row) for row in q], dtype=np.int64).reshape(k, trials).T
    outputs = student.call("verify_many", draft_tokens=drafts, draft_probs=q, target_probs=p,
                           seed=int(rng.integers(2**32)), returns="array")
    if outputs.shape != (trials, k + 1) or outputs.dtype.kind not in "iu":
        raise CheckFailure(f"{label}: verify_many returned {outputs.dtype} data of shape {outputs.shape}; expected "
                           f"integers of shape {(trials, k + 1)} (do not change verify_many)")
    lengths = (outputs >= 0).sum(axis=1)
    if (lengths == 0).any():
        raise CheckFailure(f"{label}: verify returned no token; a pass always yields at least the target's own token")
    padded = np.arange(k + 1) >= lengths[:, None]
    if (outputs[padded] != -1).any() or (outputs[~padded] < 0).any():
        raise CheckFailure(f"{label}: verify returned negative token ids")
    if (outputs >= size).any():
        raise CheckFailure(f"{label}: verify returned token id{unredacted(f' {outputs.max()}')}, outside the "
                           f"vocabulary [0, {size})")
    kept = np.arange(k + 1) < lengths[:, None] - 1
    changed = kept[:, :k] & (outputs[:, :k] != drafts)
    if changed.any():
        t, i = np.argwhere(changed)[0]
        what = unredacted(f"the drafts were {drafts[t].tolist()} and verify returned "  # hidden drafts, the answer
                          f"{outputs[t, :lengths[t]].tolist()}: ", "")
        raise CheckFailure(
            f"{label}: in trial {t}, {what}token {i} is not draft {i}, yet tokens followed it. verify returns "
            "the drafts it kept, unchanged, then ONE token of the target's, and stops at the first rejection: "
            "the drafts after it were conditioned on a token that is no longer in the text.")
    return outputs


def _check_law(label: str, what: str, tokens: np.ndarray, probs: np.ndarray, hint: str) -> None:
    """Chi-square test of the observed tokens against probs; CheckFailure with both laws if it fails."""
    counts = np.bincount(tokens, minlength=len(probs))
    p_value = goodness_of_fit(counts, probs)
    if p_value >= SIGNIFICANCE:
        return
    shown = min(len(probs), 8)
    observed = np.round(counts[:shown] / counts.sum(), 3).tolist()
    impossible = np.flatnonzero((probs == 0) & (counts > 0))
    why = (f"token {impossible[0]} has target probability 0 but came out {counts[impossible[0]]} times"
           if impossible.size else f"chi-square p-value {p_value:.2g}, where a correct verify falls below "
           f"{SIGNIFICANCE:g} once in {1 / SIGNIFICANCE:,.0f} runs")
    frequencies = unredacted(f"Expected frequencies {np.round(probs[:shown], 3).tolist()}, got {observed} over "
                             f"{counts.sum()} samples. ")  # the hidden law, and what the student's code made of it
    raise CheckFailure(f"{label}: {what} does not follow the law it should ({why}). {frequencies}{hint}")


# ------------------------------------------------------------------------------------ the checks

@check(points=1)
def acceptance_rate(student, rng, hidden):
    """acceptance_rate(target_probs, draft_probs) is sum_x min(p(x), q(x))."""
    cases = [{"target_probs": P5, "draft_probs": Q5}, {"target_probs": PEAKED[0], "draft_probs": PEAKED[1]}]
    if hidden:
        cases = [{"target_probs": P5, "draft_probs": P5}, {"target_probs": DISJOINT[0], "draft_probs": DISJOINT[1]},
                 {"target_probs": GREEDY[0], "draft_probs": GREEDY[1]},
                 {"target_probs": np.ones(1), "draft_probs": np.ones(1)}]  # V = 1
        cases += [dict(zip(("target_probs", "draft_probs"), _random_pair(rng))) for _ in range(8)]
    def nan(case, got, expected):
        return ("NaN: where p(x) = q(x) = 0, p(x)/q(x) is 0/0; sum_x min(p(x), q(x)) is the same sum without a "
                "division") if isinstance(got, float) and np.isnan(got) else ""

    try:
        compare_cases(student, "acceptance_rate", cases, reference_acceptance_rate, returns="number", hidden=hidden,
                      hint=nan)
    except CheckFailure as failure:
        raise CheckFailure(f"{failure}. alpha = sum_x q(x) min(1, p(x)/q(x)) = sum_x min(p(x), q(x)), which is "
                           "1 - (1/2) sum_x |p(x) - q(x)|: 1 when p == q, 0 when they share no token.") from None


@check(points=1)
def expected_accepted(student, rng, hidden):
    """expected_accepted(alpha, k) is 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)."""
    cases = [{"alpha": 0.6, "k": 3}, {"alpha": 0.8, "k": 1}]
    if hidden:
        cases = [{"alpha": 0.6, "k": 0}, {"alpha": 0.0, "k": 4}, {"alpha": 1.0, "k": 4}, {"alpha": 1.0, "k": 0},
                 {"alpha": 0.999, "k": 7}, {"alpha": 0.5, "k": 1}]
        cases += [{"alpha": float(rng.uniform(0, 1)), "k": int(rng.integers(0, 11))} for _ in range(10)]
    try:
        compare_cases(student, "expected_accepted", cases, reference_expected_accepted, returns="number", hidden=hidden)
    except CheckFailure as failure:
        raise CheckFailure(f"{failure}. A pass yields its token j + 1 (j = 0 .. k) only if the j drafts before it "
                           "were kept, probability alpha^j, so the mean is the sum of alpha^j for j = 0 .. k: "
                           "1 for k = 0 (the pass's own token), k + 1 for alpha = 1.") from None


@check(points=2)
def first_token(student, rng, hidden):
    """The first token verify yields follows target_probs[0] exactly (chi-square over thousands of seeded runs)."""
    cases = [_same_everywhere(P5, Q5, 1, 4000), _same_everywhere(*PEAKED, 2, 4000)]
    if hidden:
        cases = [_same_everywhere(P5, Q5, 3, 4000), _same_everywhere(*PEAKED, 1, 3000),
                 _same_everywhere(*DISJOINT, 2, 2000), _same_everywhere(*GREEDY, 1, 500)]
        for _ in range(2):
            p, q = _random_pair(rng)
            cases.append(_case([(p, q)] + [_permuted(rng, p, q) for _ in range(int(rng.integers(0, 3)))], p, 3000))
    for i, case in enumerate(cases, 1):
        label = _label(i, len(cases), case, hidden)
        outputs = _run_verify(student, case, rng, label)
        _check_law(label, "the first token", outputs[:, 0], case["p"][0], MISTAKES)


def _length_law(case: dict) -> np.ndarray:
    """P(a pass yields j tokens), j = 1 .. k + 1: drafts 1 .. j-1 kept, draft j rejected (or j = k + 1)."""
    alphas = [reference_acceptance_rate(p, q) for p, q in zip(case["p"], case["q"])]
    reached = np.cumprod([1.0] + alphas)  # P(draft j is judged), and last: P(all kept)
    return np.append(reached[:-1] * (1 - np.array(alphas)), reached[-1])


@check(points=1)
def accepted_count(student, rng, hidden):
    """The number of tokens per pass follows the acceptance rates: all k drafts kept with alpha_1 ... alpha_k."""
    cases = [_same_everywhere(P5, Q5, 3, 3000), _case([_permuted(rng, *PEAKED), PEAKED], PEAKED[0], 3000)]
    if hidden:
        cases = [_same_everywhere(P5, Q5, 5, 3000), _same_everywhere(P5, P5, 4, 300), _same_everywhere(P5, Q5, 0, 300),
                 _same_everywhere(*DISJOINT, 2, 1000), _same_everywhere(*GREEDY, 2, 300)]
        for _ in range(2):
            k = int(rng.integers(1, 5))
            p, q = _random_pair(rng, min_alpha=0.3)
            cases.append(_case([_permuted(rng, p, q) for _ in range(k)], p, 3000))
    for i, case in enumerate(cases, 1):
        label = _label(i, len(cases), case, hidden)
        lengths = (_run_verify(student, case, rng, label) >= 0).sum(axis=1)
        law = _length_law(case)
        expected_mean = float(np.arange(1, len(law) + 1) @ law)
        hint = (unredacted(f"Mean tokens per pass: expected {expected_mean:.3f}, got {lengths.mean():.3f}. ")
                + "Draft i is kept with "
                "probability min(1, p_i(x)/q_i(x)) (always when p_i(x) >= q_i(x)); the pass stops at the first "
                "rejection, and when all k drafts are kept it adds a bonus token drawn from target_probs[k], "
                "so it yields k + 1 tokens.")
        _check_law(label, "the number of tokens per pass", lengths - 1, law, hint)


@check(points=2)
def later_positions(student, rng, hidden):
    """The token at each position j >= 1 (among passes that reach it), the bonus included, follows target_probs[j]."""
    cases = [_case([_permuted(rng, P5, Q5), _permuted(rng, P5, Q5)], _permuted(rng, P5, Q5)[0], 4000)]
    if hidden:
        cases = [_case([_permuted(rng, P5, Q5) for _ in range(3)], _permuted(rng, P5, Q5)[0], 5000),
                 _same_everywhere(P5, Q5, 1, 2000), _case([DISJOINT, PEAKED], PEAKED[0], 3000)]
        for _ in range(2):
            k = int(rng.integers(2, 4))
            p, q = _random_pair(rng, min_alpha=0.5)
            cases.append(_case([_permuted(rng, p, q) for _ in range(k)], _permuted(rng, p, q)[0], 3000))
    for i, case in enumerate(cases, 1):
        label = _label(i, len(cases), case, hidden)
        outputs = _run_verify(student, case, rng, label)
        k = case["q"].shape[0]
        for j in range(1, k + 1):
            reached = outputs[:, j] >= 0
            if j == k and not reached.any():
                raise CheckFailure(f"{label}: no pass yielded {k + 1} tokens, though all {k} drafts are kept with "
                                   f"probability {unredacted(f'{_length_law(case)[-1]:.2f}', 'above 0')}: when every "
                                   "draft is kept, verify must "
                                   "add the bonus token, drawn from target_probs[k], which the target's pass "
                                   "computed anyway.")
            bonus = " (the bonus token after all k drafts were kept)" if j == k else ""
            _check_law(label, f"the token at position {j}{bonus}", outputs[reached, j], case["p"][j],
                       f"Position {j} must use row {j} of draft_probs and target_probs. {MISTAKES}")


# Bigram models (V = 3): row c is the law of the next token after token c.
TARGET_TABLE = np.array([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7], [0.3, 0.4, 0.3]])
DRAFT_TABLE = np.array([[0.2, 0.3, 0.5], [0.5, 0.4, 0.1], [0.3, 0.3, 0.4]])
TEXT_LENGTH = 3


def _joint_law(table: np.ndarray, n: int) -> np.ndarray:
    """P(x_1 .. x_n) of the bigram chain after token 0, flattened in C order."""
    law = table[0]
    for _ in range(n - 1):
        law = law[..., None] * table  # [..., a, b] = P(..., a) * P(b after a)
    return law.ravel()


@check(points=2)
def generated_text(student, rng, hidden):
    """Texts that several verify calls generate from a bigram model have the target's joint law of three tokens."""
    cases = [{"target_table": TARGET_TABLE, "draft_table": DRAFT_TABLE, "k": 2, "trials": 5000}]
    if hidden:
        cases = [{"target_table": TARGET_TABLE, "draft_table": DRAFT_TABLE, "k": k, "trials": 4000} for k in (1, 3)]
        uniform = np.full((3, 3), 1 / 3)
        cases.append({"target_table": rng.dirichlet(np.full(3, 3.0), size=3), "draft_table": uniform,
                      "k": int(rng.integers(1, 4)), "trials": 3000})
    for i, case in enumerate(cases, 1):
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)} (k = {case['k']}, {case['trials']} texts)"
        texts = student.call("sample_text", n=TEXT_LENGTH, seed=int(rng.integers(2**32)), returns="array", **case)
        size = len(case["target_table"])
        if texts.shape != (case["trials"], TEXT_LENGTH) or texts.dtype.kind not in "iu" or \
                texts.min() < 0 or texts.max() >= size:
            raise CheckFailure(f"{label}: sample_text returned {texts.dtype} data of shape {texts.shape}; expected "
                               f"token ids in [0, {size}) of shape {(case['trials'], TEXT_LENGTH)}")
        cells = np.ravel_multi_index(texts.T, (size,) * TEXT_LENGTH)
        _check_law(label, "the joint law of the 3 tokens (listed as x1 x2 x3 = 000, 001, ...)", cells,
                   _joint_law(case["target_table"], TEXT_LENGTH),
                   "Each token must follow the target's row for the token before it, also when a later pass "
                   f"produced it. {MISTAKES}")
