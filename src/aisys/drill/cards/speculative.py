"""Speculative decoding: tokens per target pass (1 - α^(γ+1)) / (1 - α), the speed-up against the draft's cost, the
acceptance rate, and why the output follows the target exactly (aisys.inference.speculative)."""

import numpy as np

from aisys import prose
from aisys.hardware import CHIPS
from aisys.inference.cost import step_seconds
from aisys.inference.model import LLAMA_3_8B, LLAMA_3_70B
from aisys.inference.speculative import acceptance_rate, expected_accepted, speedup

from ..card import Ask, Choice, Number, card

PAGE = "07-inference/speculative-decoding"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
CONTEXT = 1000


def _cost_ratio() -> float:
    """c: a Llama-3-8B draft step in units of a Llama-3-70B target step on an H100 (roofline), as the page takes it."""
    return (step_seconds(LLAMA_3_8B, [(1, CONTEXT)], H100) / step_seconds(LLAMA_3_70B, [(1, CONTEXT)], H100))


def _series(alpha: float, gamma: int) -> str:
    return " + ".join(f"{alpha**i:.3g}" for i in range(gamma + 1))


@card(topic="decoding", difficulty="easy", frequency="high", page=PAGE)
def expected_tokens_per_pass():
    alpha, gamma = 80 / 100, 4
    tokens = expected_accepted(alpha, gamma)
    return Ask(
        f"In speculative decoding each draft token is accepted with probability α = {alpha:g}, independently, and "
        f"the draft proposes γ = {gamma} tokens per round. How many tokens does one pass of the target yield on "
        "average?",
        Number(tokens, rel=0.02, unit="tokens"),
        f"Token i + 1 of the round is produced only if the i drafts before it were accepted (probability α^i), and "
        f"the target always adds one of its own (a correction or the bonus token): 1 + α + ... + α^γ = "
        f"(1 - α^(γ+1)) / (1 - α) = {_series(alpha, gamma)} = {tokens:.2f}.")


@card(topic="decoding", difficulty="medium", frequency="medium", page=PAGE)
def expected_tokens_low_acceptance():
    alpha, gamma = 60 / 100, 8
    tokens = expected_accepted(alpha, gamma)
    return Ask(
        f"With acceptance rate α = {alpha:g} and γ = {gamma} draft tokens per round, what is the expected number of "
        "tokens per target pass?",
        Number(tokens, rel=0.02, unit="tokens"),
        f"(1 - α^(γ+1)) / (1 - α) = (1 - {alpha:g}^{gamma + 1}) / {1 - alpha:g} = {tokens:.2f}. It can never exceed "
        f"1 / (1 - α) = {1 / (1 - alpha):.2f}, however many drafts: late drafts are rarely reached. With α = "
        f"{alpha:g}, drafts past the first few are wasted work.")


@card(topic="decoding", difficulty="easy", frequency="low", page=PAGE)
def tokens_per_pass_limit():
    alpha = 90 / 100
    limit = 1 / (1 - alpha)
    return Ask(
        f"With acceptance rate α = {alpha:g}, what does the expected number of tokens per target pass approach as "
        "the draft length γ grows without bound?",
        Number(limit, rel=0.01, unit="tokens"),
        f"The geometric series 1 + α + α^2 + ... sums to 1 / (1 - α) = {limit:g}; with γ = 4 it is already "
        f"{expected_accepted(alpha, 4):.2f}, with γ = 16 {expected_accepted(alpha, 16):.2f}. The gain comes from α "
        "far more than from γ.")


@card(topic="decoding", difficulty="hard", frequency="high", page=PAGE)
def speculative_speedup():
    alpha, gamma = 80 / 100, 4
    c = _cost_ratio()
    gain = speedup(alpha, gamma, c)
    return Ask(
        f"Llama-3-8B drafts for Llama-3-70B on an H100 (batch 1). A draft step costs c = {c:.3f} of a target step "
        f"(the roofline's ratio of their decode steps). With α = {alpha:g} and γ = {gamma}, what is the expected "
        "speed-up over decoding with the target alone?",
        Number(gain, rel=0.03, unit="x"),
        f"A round costs γ draft steps and one target pass, γ c + 1 = {gamma * c + 1:.2f} target steps, and yields "
        f"(1 - α^(γ+1)) / (1 - α) = {expected_accepted(alpha, gamma):.2f} tokens: speed-up "
        f"{expected_accepted(alpha, gamma):.2f} / {gamma * c + 1:.2f} = {prose.times(gain)} (Leviathan et al., "
        "Theorem 3.8). The target pass verifies γ + 1 positions for about the price of one decode step because "
        "decode is memory-bound.")


@card(topic="decoding", difficulty="hard", frequency="medium", page=PAGE)
def best_draft_length():
    alpha = 70 / 100
    c = _cost_ratio()
    gains = {gamma: speedup(alpha, gamma, c) for gamma in range(1, 21)}
    best = max(gains, key=gains.get)
    return Ask(
        f"With acceptance rate α = {alpha:g} and a draft costing c = {c:.3f} of a target step, which draft length γ "
        "gives the largest expected speed-up?",
        Number(best, rel=0.01, unit="tokens"),
        f"S(γ) = (1 - α^(γ+1)) / ((1 - α)(γ c + 1)): the numerator saturates at 1 / (1 - α) = "
        f"{1 / (1 - alpha):.2f} while the cost grows linearly. " + ", ".join(
            f"γ = {g}: {gains[g]:.3f}" for g in range(max(best - 2, 1), best + 3))
        + f". The best is γ = {best}, at {prose.times(gains[best])}; a cheaper draft or a higher α pushes it up.")


@card(topic="decoding", difficulty="hard", frequency="low", page=PAGE)
def acceptance_rate_of_two_distributions():
    p = np.array([2, 1, 1]) / 4
    q = np.array([1, 2, 1]) / 4
    alpha = acceptance_rate(p, q)
    return Ask(
        "Over a vocabulary of three tokens the target's next-token distribution is p = (1/2, 1/4, 1/4) and the "
        "draft's q = (1/4, 1/2, 1/4). What is the probability that a token drawn from q is accepted?",
        Number(alpha, rel=0.01, unit=""),
        f"A draft token x is kept with probability min(1, p(x) / q(x)), so α = Σ_x q(x) min(1, p(x)/q(x)) = "
        f"Σ_x min(p(x), q(x)) = {' + '.join(f'{v:g}' for v in np.minimum(p, q))} = {alpha:g}: one minus the total "
        "variation distance between p and q. On a rejection the target's token is drawn from norm(max(0, p - q)) "
        "= the first token here.")


@card(topic="decoding", difficulty="medium", frequency="high", page=PAGE)
def speculative_output_is_exact():
    options = ("exactly the target's, whatever the draft: the draft only changes how many tokens a pass yields",
               "the draft's, corrected where the target disagrees strongly",
               "a mixture of the two distributions weighted by α",
               "the target's only at temperature 0")
    return Ask(
        "With speculative sampling (accept with probability min(1, p/q), else resample from norm(max(0, p - q))), "
        "what distribution do the generated tokens follow?",
        Choice(options, 0),
        "Accepting x with probability min(1, p(x)/q(x)) gives it probability min(p(x), q(x)); the residual "
        "max(0, p - q), normalised, supplies the rest, exactly p(x) - min(p(x), q(x)). Every token follows p at any "
        "temperature (Leviathan et al., Chen et al.), so speculative decoding is lossless; a poor draft only lowers "
        "the acceptance rate and the speed-up.")


@card(topic="decoding", difficulty="hard", frequency="medium", page=PAGE)
def verification_pass_cost():
    gamma = 4
    one = step_seconds(LLAMA_3_70B, [(1, CONTEXT)], H100)
    verify = step_seconds(LLAMA_3_70B, [(gamma + 1, CONTEXT)], H100)
    return Ask(
        f"By the roofline, how many times the time of one ordinary decode step does a Llama-3-70B pass that "
        f"verifies {gamma} draft tokens ({gamma + 1} positions) take on an H100, with {CONTEXT} tokens cached?",
        Number(verify / one, rel=0.02, unit="x"),
        f"One step reads all the weights whether it processes 1 or {gamma + 1} tokens: {prose.duration(one)} against "
        f"{prose.duration(verify)}, {verify / one:.3f}x. The extra positions are nearly free because decode is "
        "memory-bound; that spare compute is what speculative decoding spends.")
