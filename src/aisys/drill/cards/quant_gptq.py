"""GPTQ: its cost against OBQ's, why it factors H^-1 by Cholesky, act-order, the calibration set and dead columns
(aisys.quant.gptq)."""

import numpy as np

from aisys.inference.model import LLAMA_2_7B
from aisys.quant import gptq

from ..card import Ask, Choice, Number, card

PAGE = "08-quantization/gptq"


def _correlated_layer(seed: int, d_col: int = 32, loud: int = 0):
    """(W, H) of a small layer whose inputs share 4 hidden factors (noise a tenth of a factor's), the first `loud`
    features scaled up 20 times (outlier features)."""
    g = np.random.default_rng(seed)
    X = g.standard_normal((512, 4)) @ g.standard_normal((4, d_col)) + g.standard_normal((512, d_col)) / 10
    X[:, :loud] *= 20
    return g.standard_normal((16, d_col)), gptq.hessian([X])


@card(topic="quantization", difficulty="medium", frequency="medium", page=PAGE)
def gptq_update_cost():
    rows, cols = LLAMA_2_7B.d_ff, LLAMA_2_7B.d_model
    updates = gptq.update_multiply_adds(rows, cols)
    obq = gptq.obq_multiply_adds(rows, cols)
    return Ask(
        f"GPTQ quantizes Llama-2-7B's up projection, a {rows} x {cols} weight (d_row x d_col). How many multiply-adds "
        "does its error feedback (the updates of the columns not yet quantized) take, in billions?",
        Number(updates / 10**9, rel=0.1, unit="billion"),
        f"Column j's error updates the d_row weights of each of the d_col - 1 - j columns after it: d_row d_col "
        f"(d_col - 1) / 2 = {updates:,}, O(d_row d_col^2); the Cholesky factorizations add O(d_col^3), once for all "
        f"rows. OBQ lets every row pick its own order, so each row eliminates its own inverse Hessian, about d_col^3 "
        f"/ 3 per row: {obq:,} multiply-adds, {obq / updates:,.0f} times more. One order for all rows is what makes "
        "GPTQ fit large models; lazy blocks of 128 columns change when the updates happen (matrix products instead "
        "of rank-1 updates), not how many.")


@card(topic="quantization", difficulty="hard", frequency="medium", page=PAGE)
def gptq_why_cholesky():
    W, H = _correlated_layer(1, d_col=8)
    damped = H + np.mean(np.diag(H)) / 100 * np.eye(len(H))
    U = gptq.hessian_inverse_factor(H)
    inverse, worst = np.linalg.inv(damped), 0
    for j in range(len(H)):
        worst = max(worst, np.abs(inverse[j, j:] / np.sqrt(inverse[j, j]) - U[j, j:]).max())
        inverse = inverse - np.outer(inverse[:, j], inverse[j, :]) / inverse[j, j]
    return Ask(
        "Why does GPTQ compute the upper Cholesky factor U of H^-1 (H^-1 = U^T U) before quantizing a layer?",
        Choice((
            "A triangular matrix multiplies faster on tensor cores than a full one",
            "The factor makes H diagonal, so each column's error no longer affects the others",
            "Row j of U is the inverse Hessian's row j after columns 0..j-1 are eliminated (scaled by its diagonal's "
            "square root): every inverse the OBS updates need, computed once and stably",
            "Cholesky rounds H to the quantization grid so that the codes come out integer",
        ), 2),
        "Each OBS step needs H^-1 of the columns not yet quantized; with one fixed order, those are the successive "
        "Gaussian eliminations of H^-1, and their rows are exactly U's rows: on an 8-column example, the largest "
        f"difference is {worst:.0e}. Repeating the eliminations in float32 accumulates rounding errors that made "
        "the inverse indefinite on large models; one factorization (of the damped H) avoids that. A step is then "
        "e_j = (w_j - q_j) / U_jj and W[:, j:] -= e_j U[j, j:].")


@card(topic="quantization", difficulty="medium", frequency="high", page=PAGE)
def gptq_act_order():
    W, H = _correlated_layer(2, loud=3)
    plain = gptq.hessian_error(W, gptq.gptq(W, H, bits=3), H)
    ordered = gptq.hessian_error(W, gptq.gptq(W, H, bits=3, act_order=True), H)
    return Ask(
        "What does GPTQ's act-order option do?",
        Choice((
            "Quantizes the activations as well as the weights, in order of their magnitude",
            "Quantizes the columns in order of decreasing H_ii (the largest input activations first), then puts the "
            "columns back in the layer's order",
            "Sorts each row's weights by magnitude and keeps the order in the checkpoint",
            "Skips the columns with the smallest activations, leaving them in full precision",
        ), 1),
        "The last columns quantized have no columns left to absorb their errors; act-order makes those the columns "
        "whose inputs are smallest, and quantizes the loud ones while every other column can still compensate. On a "
        f"layer with three outlier input features at 3 bits, the Hessian-weighted error is {plain:.3g} in the "
        f"natural order and {ordered:.3g} with act-order. The permutation is undone at the end; with groups, a "
        "group is consecutive in the permuted order, so checkpoints store each column's group (g_idx) unless "
        "static groups are used.")


@card(topic="quantization", difficulty="easy", frequency="high", page=PAGE)
def gptq_calibration_set():
    rows = 128 * 2048
    return Ask(
        "What is GPTQ's calibration set (the paper: 128 segments of 2048 tokens of C4) used for?",
        Choice((
            "To fine-tune the quantized weights by gradient descent",
            "To pick each row's scale by the largest activation seen",
            "To measure the quantized model's perplexity before keeping it",
            "To estimate, per layer, H = 2 X^T X / n: which input features are large and which move together",
        ), 3),
        f"GPTQ runs the {rows:,} calibration tokens through the model layer by layer and accumulates each layer's "
        "input second moments, H = 2 X^T X / n (what the layer's squared output error depends on). The error "
        "feedback uses H^-1 to let correlated columns cancel each other's rounding errors. Inputs are taken after "
        "the layers before are already quantized, so each layer also compensates upstream errors. No gradients, "
        "no training: the scales come from the (updated) weights by min-max.")


@card(topic="quantization", difficulty="medium", frequency="low", page=PAGE)
def gptq_dead_columns():
    W, H = _correlated_layer(3, d_col=12)
    H[4, :] = H[:, 4] = 0  # input feature 4 is 0 on every calibration token
    Q = gptq.gptq(W, H, bits=4)
    return Ask(
        "GPTQ finds H_ii = 0 for input column i of a layer (a 'dead' column). What does that mean, and what does "
        "it do?",
        Choice((
            "Feature i was 0 on every calibration input: it sets H_ii = 1 (so H can be factored) and W[:, i] = 0",
            "Weight column i is all zeros: it skips quantizing it",
            "Feature i is an outlier: it keeps column i in full precision",
            "H is singular: it stops and asks for more calibration data",
        ), 0),
        "H_ii = 2 mean(x_i^2) is 0 only if input i never fired on the calibration set. Its weights then multiply "
        "nothing the error can see, so GPTQ zeroes them and sets H_ii = 1 to keep the factorization defined (the "
        f"dampening, 1 % of the mean diagonal, then covers the rest). In a 12-column example with column 4 dead, "
        f"the result's column 4 holds {int(np.count_nonzero(Q[:, 4]))} nonzero weights and "
        f"{int(np.isnan(Q).sum())} NaN. A feature that is 0 on the calibration set but not in deployment is a "
        "calibration-set problem: that weight is lost.")
