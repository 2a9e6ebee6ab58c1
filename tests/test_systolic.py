"""The systolic-array model and its reference dataflows: products, measured cycles, rules enforced, errors."""

import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisys.systolic import array, dataflows, pictures

DATAFLOWS = ("os", "ws")


def distinct(m, k, n, dtype=np.int64, seed=0):
    """A (m x k) and B (k x n) with distinct nonzero values, as the grader uses."""
    rng = np.random.default_rng(seed)
    values = rng.permutation(np.arange(1, m * k + k * n + 1)) * rng.choice([-1, 1], m * k + k * n)
    values = values.astype(dtype)
    return values[:m * k].reshape(m, k), values[m * k:].reshape(k, n)


def run(A, B, rows, cols, dataflow, step=None, skew=dataflows.skew):
    return array.run(A, B, rows, cols, dataflow, step=step or dataflows.STEPS[dataflow], skew=skew)


# ------------------------------------------------------------------------------------------ products and counts

@settings(max_examples=40, deadline=None)
@given(M=st.integers(1, 11), N=st.integers(1, 11), K=st.integers(1, 11), rows=st.integers(1, 5),
       cols=st.integers(1, 5), dataflow=st.sampled_from(DATAFLOWS))
def test_tiled_product_is_exact_and_takes_the_formulas_cycles(M, N, K, rows, cols, dataflow):
    A, B = distinct(M, K, N)
    done = array.run_schedule(A, B, rows, cols, dataflow, dataflows.schedule(M, N, K, rows, cols, dataflow),
                              step=dataflows.STEPS[dataflow], skew=dataflows.skew)
    assert np.array_equal(done.output, A @ B)
    assert done.cycles == dataflows.cycles(M, N, K, rows, cols, dataflow)
    np.testing.assert_allclose(done.utilisation, dataflows.utilisation(M, N, K, rows, cols, dataflow))
    assert all(trace.complete and not trace.mismatches for trace in done.traces)
    assert sum(int(busy.sum()) for trace in done.traces for busy in trace.busy) == M * N * K  # each product once


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dataflow", DATAFLOWS)
def test_floats_match_numpy_within_their_precision(dtype, dataflow):
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((9, 13)).astype(dtype), rng.standard_normal((13, 7)).astype(dtype)
    C, _ = dataflows.matmul(A, B, 4, 3, dataflow)
    assert C.dtype == dtype
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


def test_int8_data_accumulates_without_overflow():
    A = np.full((4, 64), 127, np.int8)
    B = np.full((64, 4), -128, np.int8)
    C, _ = dataflows.matmul(A, B, 4, 4, "ws")
    assert np.array_equal(C, np.full((4, 4), 64 * 127 * -128))


@pytest.mark.parametrize("m, n, K, rows, cols", [(4, 4, 8, 4, 4), (2, 3, 5, 4, 4), (1, 1, 1, 1, 1), (3, 1, 7, 3, 5)])
def test_one_output_stationary_tile_takes_K_plus_m_plus_n_minus_2(m, n, K, rows, cols):
    assert run(*distinct(m, K, n), rows, cols, "os").cycles == K + m + n - 2


@pytest.mark.parametrize("M, n, k, rows, cols", [(8, 4, 4, 4, 4), (3, 2, 2, 5, 4), (1, 1, 1, 1, 1), (1, 3, 4, 4, 3)])
def test_one_weight_stationary_tile_takes_the_load_then_M_plus_rows_plus_n_minus_2(M, n, k, rows, cols):
    trace = run(*distinct(M, k, n), rows, cols, "ws")
    assert trace.cycles == k + M + rows + n - 2
    assert trace.phases[:k] == ["load"] * k and set(trace.phases[k:]) == {"compute"}


def test_a_full_tile_is_busy_K_out_of_K_plus_R_plus_C_minus_2_cycles():
    for K, R, C in [(8, 4, 4), (64, 8, 8), (3, 5, 2)]:
        trace = run(*distinct(R, K, C), R, C, "os")
        assert trace.utilisation.mean() == pytest.approx(K / (K + R + C - 2))


def test_utilisation_fills_and_drains_as_a_diagonal_wavefront():
    trace = run(*distinct(4, 4, 4), 4, 4, "os")
    assert [int(busy.sum()) for busy in trace.busy] == [1, 3, 6, 10, 12, 12, 10, 6, 3, 1]
    # PE(i, j) works on term k in cycle i + j + k: its busy cycles are i + j .. i + j + K - 1
    for t, busy in enumerate(trace.busy):
        i, j = np.indices(busy.shape)
        assert np.array_equal(busy, (t - i - j >= 0) & (t - i - j < 4))


@pytest.mark.parametrize("args, expected", [
    ((4, 4, 8, 4, 4, "os"), 14), ((8, 4, 4, 4, 4, "ws"), 18), ((1, 1, 1, 1, 1, "os"), 1), ((1, 1, 1, 1, 1, "ws"), 2),
    ((7, 5, 6, 4, 4, "os"), 12 + 9 + 11 + 8), ((7, 5, 6, 4, 4, "ws"), 17 + 15 + 14 + 12),
])
def test_cycles_by_hand(args, expected):
    assert dataflows.cycles(*args) == expected


def test_cycles_closed_form_equals_the_sum_over_tiles_for_big_shapes():
    for M, N, K, rows, cols in [(8192, 8192, 8192, 128, 128), (1, 8192, 8192, 128, 128), (1000, 77, 1, 3, 256)]:
        for dataflow in DATAFLOWS:
            total = 0
            for tile in dataflows.schedule(M, N, K, rows, cols, dataflow):
                m, n, k = (tile[d][1] - tile[d][0] for d in "mnk")
                total += K + m + n - 2 if dataflow == "os" else k + M + rows + n - 2
            assert dataflows.cycles(M, N, K, rows, cols, dataflow) == total


def test_schedule_cuts_ragged_tiles_and_streams_the_right_dimension():
    assert dataflows.schedule(5, 3, 7, 4, 2, "os") == [
        {"m": [0, 4], "n": [0, 2], "k": [0, 7]}, {"m": [0, 4], "n": [2, 3], "k": [0, 7]},
        {"m": [4, 5], "n": [0, 2], "k": [0, 7]}, {"m": [4, 5], "n": [2, 3], "k": [0, 7]}]
    assert dataflows.schedule(5, 3, 7, 4, 2, "ws") == [
        {"m": [0, 5], "n": [0, 2], "k": [0, 4]}, {"m": [0, 5], "n": [0, 2], "k": [4, 7]},
        {"m": [0, 5], "n": [2, 3], "k": [0, 4]}, {"m": [0, 5], "n": [2, 3], "k": [4, 7]}]


def test_skew_is_a_parallelogram():
    table = np.array([dataflows.skew(t, 3, 2) for t in range(5)])
    assert table.tolist() == [[0, -1, -1], [1, 0, -1], [-1, 1, 0], [-1, -1, 1], [-1, -1, -1]]


def test_trace_records_every_cycle_and_where_values_came_from():
    A, B = distinct(2, 3, 2)
    trace = run(A, B, 2, 2, "os")
    assert len(trace.registers) == len(trace.sources) == len(trace.busy) == len(trace.phases) == trace.cycles == 5
    assert trace.sources[1]["a"].tolist() == [[1, 0], [0, -1]]  # row 1 starts a cycle late
    assert trace.registers[1]["a"][0, 1] == A[0, 0] and trace.registers[1]["b"][1, 0] == B[0, 0]
    assert trace.sources[-1]["terms"].tolist() == [[3, 3], [3, 3]]


# ------------------------------------------------------------------------------------------ the rules are enforced

def os_with(a_shift=None, acc_rule=None):
    """An output-stationary step with one part replaced by a mistake."""
    def step(a, b, acc, left, top):
        new_a = a_shift(a, left) if a_shift else np.concatenate([left[:, None], a[:, :-1]], axis=1)
        new_b = np.concatenate([top[None, :], b[:-1]], axis=0)
        new_acc = acc_rule(a, b, acc, new_a, new_b, left, top) if acc_rule else acc + new_a * new_b
        return new_a, new_b, new_acc
    return step


def two_hops(a, left):
    a = a.copy()
    a[:, 2:] = a[:, :-2]
    a[:, 0] = left
    return a


@pytest.mark.parametrize("step, pattern", [
    (os_with(a_shift=two_hops), r"cycle 1: PE\(0, 2\) register a holds A\[0, 0\] .* was at PE\(0, 0\) in cycle 0: "
                                r"2 PEs in one cycle"),
    (os_with(a_shift=lambda a, left: a if a.any() else np.concatenate([left[:, None], a[:, :-1]], axis=1)),
     r"cycle 1: PE\(0, 0\) register a holds A\[0, 0\] .* already there in cycle 0: it should have moved on"),
    (os_with(a_shift=lambda a, left: np.repeat(left[:, None], a.shape[1], axis=1)),
     r"entered at the left edge .* reaches only the first PE"),
    (os_with(acc_rule=lambda a, b, acc, new_a, new_b, left, top: acc + a * b),
     r"cycle 0: PE\(0, 0\) acc = 0 but acc \+ a\*b = 0 \+ .*nothing was added, though values had just arrived"),
    (os_with(acc_rule=lambda a, b, acc, new_a, new_b, left, top: acc + np.outer(left, top)), r"values at the edges"),
])
def test_a_step_that_breaks_the_rule_is_stopped_with_a_message_saying_where(step, pattern):
    A, B = distinct(3, 4, 3)
    with pytest.raises(array.LocalityError, match=pattern):
        run(A, B, 3, 3, "os", step=step)


def test_computing_the_product_directly_is_caught():
    A, B = distinct(3, 4, 3)

    def direct(a, b, acc, left, top):
        a, b, _ = dataflows.os_step(a, b, acc, left, top)
        return a, b, (A @ B).astype(acc.dtype)

    with pytest.raises(array.LocalityError, match=r"cycle 0: PE\(0, 0\) acc = .*a product computed directly"):
        run(A, B, 3, 3, "os", step=direct)


def test_values_in_the_wrong_register_are_named():
    A, B = distinct(2, 3, 2)

    def swapped(a, b, acc, left, top):
        a, b, acc = dataflows.os_step(a, b, acc, left, top)
        return b, a, acc

    with pytest.raises(array.LocalityError, match=r"register a holds .* in register b|register a holds"):
        run(A, B, 2, 2, "os", step=swapped)


def test_weight_stationary_partial_sums_must_move_down():
    A, B = distinct(4, 3, 3)

    def stay(x, psum, w, left):
        x, _ = dataflows.ws_step(x, psum, w, left)
        return x, psum + x * w

    with pytest.raises(array.LocalityError, match=r"psum = .* kept the partial sum in place"):
        run(A, B, 3, 3, "ws", step=stay)


def test_float_rounding_of_the_same_sum_is_accepted():
    A = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    B = np.random.default_rng(3).standard_normal((5, 3)).astype(np.float32)

    def in_float64(a, b, acc, left, top):
        a, b, _ = dataflows.os_step(a, b, acc, left, top)
        return a, b, acc.astype(np.float64) + a.astype(np.float64) * b

    assert run(A, B, 3, 3, "os", step=in_float64).complete


def test_an_unskewed_feed_pairs_operands_of_different_k():
    A, B = distinct(3, 4, 3)
    trace = run(A, B, 3, 3, "os", skew=lambda t, n, length: np.full(n, t if t < length else -1))
    assert not trace.complete
    assert trace.mismatches[0] == "cycle 1: PE(0, 1) multiplied A[0, 0] by B[1, 1]"
    assert not np.array_equal(trace.output, A @ B)


# ------------------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("kwargs, pattern", [
    ({"rows": 0}, "rows must be an integer >= 1"),
    ({"cols": 2.5}, "cols must be an integer >= 1"),
    ({"dataflow": "rs"}, "dataflow must be one of 'os', 'ws'"),
    ({"A": np.zeros((2, 3, 1))}, "A must be a non-empty 2-D array"),
    ({"B": np.array([["a"]])}, "B must be a non-empty 2-D array of integers or floats"),
    ({"B": np.zeros((4, 2))}, r"A's columns to match B's rows"),
    ({"A": np.zeros((5, 3))}, r"holds at most a 4 x 4 tile of C"),
    ({"dataflow": "ws", "B": np.zeros((3, 5))}, r"tile of B \(the weights\); this one is 3 x 5"),
])
def test_run_rejects_bad_arguments_naming_them(kwargs, pattern):
    arguments = {"A": np.ones((2, 3)), "B": np.ones((3, 2)), "rows": 4, "cols": 4, "dataflow": "os"}
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=pattern):
        array.run(**arguments, step=dataflows.os_step if arguments["dataflow"] != "ws" else dataflows.ws_step,
                  skew=dataflows.skew)


def test_run_needs_functions():
    with pytest.raises(TypeError, match="step and skew must be functions"):
        array.run(np.ones((1, 1)), np.ones((1, 1)), 1, 1, "os", step=None, skew=dataflows.skew)


@pytest.mark.parametrize("skew, pattern", [
    (lambda t, n, length: [0] * (n + 1), r"skew\(0, 2, 3\) must return 2 integers"),
    (lambda t, n, length: np.full(n, 0.5), r"must return 2 integers"),
    (lambda t, n, length: np.full(n, t), r"skew\(3, 2, 3\) gave 3 for stream 0: each entry must be -1"),
    (lambda t, n, length: np.full(n, -2), r"gave -2"),
    (lambda t, n, length: None, r"must return 2 integers"),
])
def test_a_bad_skew_is_reported(skew, pattern):
    with pytest.raises(ValueError, match=pattern):
        array.run(np.ones((2, 3)), np.ones((3, 2)), 2, 2, "os", step=dataflows.os_step, skew=skew)


@pytest.mark.parametrize("step, pattern", [
    (lambda a, b, acc, left, top: (a, b), r"cycle 0: os_step must return \(a, b, acc\), 3 arrays of shape \(2, 2\); "
                                          r"it returned 2 values"),
    (lambda a, b, acc, left, top: a, r"it returned ndarray"),
    (lambda a, b, acc, left, top: (a, b, acc[:1]), r"returned acc of shape \(1, 2\)"),
    (lambda a, b, acc, left, top: (a, b, [["x", "y"], ["z", "w"]]), r"returned acc of shape \(2, 2\) and dtype <U1"),
])
def test_a_malformed_step_answer_is_reported(step, pattern):
    with pytest.raises(ValueError, match=pattern):
        array.run(np.ones((2, 3)), np.ones((3, 2)), 2, 2, "os", step=step, skew=dataflows.skew)


@pytest.mark.parametrize("tiles, pattern", [
    ("all", "tiles must be a list of dicts"),
    ([{"m": [0, 2], "n": [0, 2]}], r"tiles\[0\] must be a dict with keys 'm', 'n' and 'k'"),
    ([{"m": [0, 2], "n": [0, 2], "k": [0]}], r"tiles\[0\]\['k'\] must be \[start, stop\]"),
    ([{"m": [0, 2], "n": [0, 2], "k": [0, 4]}],
     r"tiles\[0\]\['k'\] = \[0, 4\] must satisfy 0 <= start < stop <= K = 3"),
    ([{"m": [1, 1], "n": [0, 2], "k": [0, 3]}], r"must satisfy 0 <= start < stop"),
    ([{"m": [0, 2], "n": [0, True], "k": [0, 3]}], r"two integers"),
    ([{"m": [0, 2], "n": [0, 2], "k": [0, 3]}], r"tiles\[0\] .* holds at most a 1 x 1 tile"),
])
def test_run_schedule_rejects_bad_tiles(tiles, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern):
        array.run_schedule(np.ones((2, 3)), np.ones((3, 2)), 1, 1, "os", tiles, step=dataflows.os_step,
                           skew=dataflows.skew)


@pytest.mark.parametrize("args, pattern", [
    ((0, 1, 1, 1, 1, "os"), "M must be an integer >= 1"),
    ((1, True, 1, 1, 1, "os"), "N must be an integer >= 1"),
    ((1, 1, 1.0, 1, 1, "os"), "K must be an integer >= 1"),
    ((1, 1, 1, -1, 1, "ws"), "rows must be an integer >= 1"),
    ((1, 1, 1, 1, 1, "OS"), "dataflow must be one of"),
])
@pytest.mark.parametrize("function", [dataflows.cycles, dataflows.schedule, dataflows.utilisation])
def test_reference_functions_reject_bad_sizes(function, args, pattern):
    with pytest.raises(ValueError, match=pattern):
        function(*args)


def test_matmul_rejects_vectors():
    with pytest.raises(ValueError, match="A and B must be 2-D arrays"):
        dataflows.matmul(np.ones(3), np.ones((3, 1)), 2, 2, "os")


# ------------------------------------------------------------------------------------------ pictures

def test_text_shows_each_register_by_origin():
    trace = run(*distinct(2, 2, 2), 2, 2, "os")
    shown = pictures.text(trace, 1)
    assert shown.splitlines()[0] == "cycle 1 (compute): 3 of 4 PEs busy (output-stationary)"
    assert "A0,1  A0,0" in shown and "B1,0" in shown


def test_drawing_and_animation_work_offline():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trace = run(*distinct(2, 2, 2), 2, 2, "ws")
    fig, ax = plt.subplots()
    pictures.draw(trace, trace.cycles - 1, ax)
    plt.close(fig)
    fig = pictures.figure(trace, [0, 1, 2], columns=2)
    assert len(fig.axes) == 4
    plt.close(fig)
    with pytest.raises(ValueError, match="columns be an integer >= 1"):
        pictures.figure(trace, [0], columns=0)
    html = pictures.animation(trace, size=1.5, dpi=30)
    assert "<img" in html and "font-awesome" not in html and 'class="fa' not in html
    assert not re.search(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""", html)


@pytest.mark.parametrize("t", [-1, 99, 1.0, True])
def test_pictures_reject_cycles_outside_the_trace(t):
    trace = run(*distinct(1, 1, 1), 1, 1, "os")
    with pytest.raises(ValueError, match="t must be a cycle of the trace, 0 .. 0"):
        pictures.text(trace, t)


def test_pictures_need_a_trace():
    with pytest.raises(TypeError, match="trace must be an aisys.systolic.array.Trace"):
        pictures.text({"cycles": 1}, 0)


# ------------------------------------------------------------------------------------------ the answer key stays hidden

def test_the_model_does_not_import_the_answer_key():
    code = ("import sys, aisys.systolic, aisys.systolic.array, aisys.systolic.pictures; "
            "assert 'aisys.systolic.dataflows' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_grading_hides_the_reference_and_not_the_model():
    from aisys_grader.exercise import find

    assert find("03-tensor-cores/systolic").spec.reference == ("aisys.systolic.dataflows",)
