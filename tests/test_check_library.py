"""The check library: plain data only, tolerances per dtype, messages that help without revealing hidden inputs."""

import numpy as np
import pytest

from aisys_grader import CheckFailure, InProcessStudent, assert_close, check, checks_for, compare_cases, run
from aisys_grader import plain
from aisys_grader.checks import case_on_ranks, rng_for
from aisys_grader.exercise import exercise_of_module, module_name
from aisys_grader.compare import assert_format, redacted


class AlwaysEqual:
    def __eq__(self, other):
        return True


class SneakyArray(np.ndarray):
    def __eq__(self, other):
        return np.ones(self.shape, dtype=bool)


class SneakyFloat(float):
    def __eq__(self, other):
        return True


def call(function, returns="any", *args, **kwargs):
    return InProcessStudent({"f": function}).call("f", *args, returns=returns, **kwargs)


def test_plain_data_round_trips_without_pickle():
    value = {"a": [1, 2.5, None, True, "s", float("inf"), float("nan")],
             "b": np.arange(6, dtype=np.float16).reshape(2, 3), "c": (np.int64(3),)}
    back = plain.decode(plain.encode(value))
    assert back["a"][:6] == [1, 2.5, None, True, "s", float("inf")] and np.isnan(back["a"][6])
    assert back["b"].dtype == np.float16 and (back["b"] == value["b"]).all()
    assert back["c"] == [3]
    assert "pickle" not in plain.encode(value)


@pytest.mark.parametrize("result", [AlwaysEqual(), {"x": AlwaysEqual()}, {1: 2}, np.array([object()]),
                                    np.arange(3).view(SneakyArray), lambda: 0, iter([1])])
def test_results_that_are_not_plain_data_fail(result):
    with pytest.raises(CheckFailure, match="not plain data|expected"):
        call(lambda: result)


def test_subclasses_of_builtins_are_refused_but_numpy_scalars_convert():
    with pytest.raises(CheckFailure, match="SneakyFloat, which is not plain data"):
        call(lambda: SneakyFloat(2.0), "number")
    value = call(lambda: np.float32(2.5), "number")
    assert type(value) is float and value == 2.5


def test_declared_kind_is_enforced():
    with pytest.raises(CheckFailure, match="expected number"):
        call(lambda: True, "number")
    with pytest.raises(CheckFailure, match="expected string"):
        call(lambda: 3, "string")
    assert call(lambda: 3, "number") == 3


def test_student_errors_become_failures_that_say_what_happened():
    def not_done():
        raise NotImplementedError()

    with pytest.raises(CheckFailure, match="not implemented yet"):
        call(not_done)
    with pytest.raises(CheckFailure, match="raised ZeroDivisionError"):
        call(lambda: 1 / 0)
    with pytest.raises(CheckFailure, match="`g` is not defined"):
        InProcessStudent({}).call("g")


def test_a_provided_driver_s_unwritten_callee_is_named():
    """A driver the notebook provides is not what the student must write: the message names the method it called."""
    scope = {}
    exec("class Cache:\n    def put(self, x):\n        raise NotImplementedError\n\n\n"
         "def driver(ops):\n    cache = Cache()\n    return [cache.put(x) for x in ops]\n", scope)
    with pytest.raises(CheckFailure, match=r"`driver` calls `Cache.put`, which is not implemented yet"):
        InProcessStudent(scope).call("driver", [1])


def test_student_cannot_mutate_the_checks_inputs():
    data = np.zeros(4)

    def mutate(a):
        a[:] = 7
        return a

    call(mutate, "array", data)
    assert (data == 0).all()


@pytest.mark.parametrize("dtype, close, far", [
    (np.float32, 1e-6, 1e-3), (np.float16, 5e-4, 1e-2), (np.float64, 1e-9, 1e-5)])
def test_tolerance_follows_the_dtype(dtype, close, far):
    expected = np.ones(8, dtype=dtype)
    assert_close((expected * (1 + close)).astype(dtype), expected)
    with pytest.raises(CheckFailure):
        assert_close((expected * (1 + far)).astype(dtype), expected)


def test_integers_compare_exactly():
    assert_close(np.arange(5), np.arange(5))
    with pytest.raises(CheckFailure):
        assert_close(np.arange(5) + np.array([0, 0, 0, 0, 1]), np.arange(5))


def test_array_message_names_the_worst_element_without_printing_the_array():
    expected = np.linspace(0, 1, 100_000, dtype=np.float32)
    got = expected.copy()
    got[12345] += 0.5
    with pytest.raises(CheckFailure) as failure:
        assert_close(got, expected)
    message = str(failure.value)
    assert "1 of 100000 elements differ" in message and "(12345,)" in message
    assert len(message) < 400


def test_nan_where_a_number_belongs_fails():
    with pytest.raises(CheckFailure):
        assert_close(np.array([np.nan, 1.0]), np.array([0.0, 1.0]))
    assert_close(np.array([np.nan]), np.array([np.nan]))


def test_shape_and_key_mismatches_are_named():
    with pytest.raises(CheckFailure, match="expected shape"):
        assert_close(np.zeros(3), np.zeros(4))
    with pytest.raises(CheckFailure, match="expected keys"):
        assert_close({"flops": 1}, {"flops": 1, "bytes": 2})


def test_hidden_cases_are_labelled_and_seeded():
    @check(points=1, exercise="tests/seeded")
    def seeded(student, rng, hidden):
        pass

    registered = checks_for("tests/seeded")["seeded"]
    a, b = rng_for(registered, True, seed=1).random(), rng_for(registered, True, seed=2).random()
    assert a != b and rng_for(registered, True, seed=1).random() == a
    assert rng_for(registered, False).random() == rng_for(registered, False).random()

    student = InProcessStudent({"double": lambda x: 2 * x + (x == 7)})
    with pytest.raises(CheckFailure, match=r"^hidden case 2 of 2: double\(x=7\): result: expected 14, got 15"):
        compare_cases(student, "double", [{"x": 1}, {"x": 7}], lambda x: 2 * x, returns="number", hidden=True)


def test_compare_cases_takes_a_tolerance_a_dtype_a_hint_a_comparison_and_a_name():
    student = InProcessStudent({"half": lambda x: (x / 2).astype(np.float32), "fails": lambda x: 1 / 0})
    cases = [{"x": np.array([2.0, 4.0])}, {"x": np.array([3.0, 1e-3])}]

    def compare(**options):
        compare_cases(student, "half", cases, lambda x: x / 2 + 1e-4 * (x < 1), returns="array", hidden=False,
                      **options)

    compare(tolerance=(0, 2e-4))
    compare(tolerance=lambda case: (0, 2e-4 if case["x"][1] < 1 else 0))
    with pytest.raises(CheckFailure, match=r"^case 2 of 2: half\(x=array\(.*\)\): result: 1 of 2 elements differ"):
        compare(tolerance=(0, 0))
    with pytest.raises(CheckFailure, match=r"^case 1 of 2: .*result: expected dtype float64, got float32\. Keep x's$"):
        compare(dtype="reference", hint=lambda case, got, expected: "Keep x's" if got.dtype != expected.dtype else "")
    with pytest.raises(CheckFailure, match=r"^case 1 of 2: half of 2 values: odd$"):
        compare(compare=lambda got, expected, case: _fail("odd"), call=lambda case: f"half of {case['x'].size} values")
    with pytest.raises(CheckFailure) as raised:  # an error the student's code raised gets no hint
        compare_cases(student, "fails", cases, lambda x: x, returns="array", hidden=False, hint=lambda *_: "a hint")
    assert "ZeroDivisionError" in str(raised.value) and "a hint" not in str(raised.value)


def _fail(message):
    raise CheckFailure(message)


def test_compare_cases_with_a_budget_stops_code_whose_time_grows_with_the_size():
    def loop(n):
        total = 0
        for _ in range(n):
            total += 1
        return total

    cases = [{"n": 10**k} for k in range(3, 13)]  # a loop cannot reach the last ones
    options = {"returns": "integer", "hidden": False, "budget": 0.01, "slow": "count with the formula."}
    compare_cases(InProcessStudent({"count": lambda n: n}), "count", cases, lambda n: n, **options)
    with pytest.raises(CheckFailure, match=r"^case \d of 10: count\(n=\d+\): right, but a call may take 0.01 CPU s "
                                           r"at any size, and this one took \d\.\d\d CPU s: count with the formula\.$"):
        compare_cases(InProcessStudent({"count": loop}), "count", cases, lambda n: n, **options)


def test_a_check_result_scores_its_points():
    @check(points=3, exercise="tests/points")
    def answer(student, rng, hidden):
        compare_cases(student, "f", [{"x": 2}], lambda x: x * x, returns="number", hidden=hidden)

    registered = checks_for("tests/points")["answer"]
    good = run(registered, InProcessStudent({"f": lambda x: x * x}), hidden=False)
    bad = run(registered, InProcessStudent({"f": lambda x: x + x + 1}), hidden=False)
    assert (good.passed, good.score) == (True, 3.0)
    assert (bad.passed, bad.score) == (False, 0.0) and "expected 4, got 5" in bad.message


def test_exercise_ids_map_to_check_modules():
    assert module_name("01-architecture/roofline") == "aisys_exercises.01-architecture.roofline.checks"
    assert exercise_of_module(module_name("01-architecture/roofline")) == "01-architecture/roofline"
    for bad in ("roofline", "01-architecture/roofline/checks", "1-architecture/roofline", "01-Arch/roofline"):
        with pytest.raises(ValueError, match="exercise: expected '<NN-chapter>/<name>'"):
            module_name(bad)
    with pytest.raises(ValueError, match="checks are registered from an exercise's checks.py"):
        check(points=1)(lambda student, rng, hidden: None)


def test_large_int64_arrays_compare_exactly_and_print_exactly():
    with pytest.raises(CheckFailure, match="expected 1152921504606846976, got 1152921504606846977"):
        assert_close(np.array([2**60 + 1]), np.array([2**60]), where="case 1")


def test_tolerance_takes_the_short_names_exercises_use():
    from aisys_grader.compare import tolerance
    for short, long in (("fp32", "float32"), ("fp16", "float16"), ("bf16", "bfloat16")):
        assert tolerance(short) == tolerance(long) != (0.0, 0.0)


def test_a_format_check_names_the_dtype_and_catches_float32_kept_where_bf16_was_asked_for():
    bf16 = np.array([1.0, 0.5, np.nan, -np.inf], np.float32)  # values bf16 holds exactly
    assert_format(bf16, "bf16")
    assert_format(np.zeros(3, np.float16), "fp16")
    assert_format(np.zeros(3, np.int64), "int64")
    with pytest.raises(CheckFailure, match=r"^result: expected dtype fp16, got float32$"):
        assert_format(np.zeros(3, np.float32), "fp16")
    with pytest.raises(CheckFailure, match=r"expected dtype bf16 \(bf16 data is carried as float32\), got float16"):
        assert_format(np.zeros(3, np.float16), "bf16")
    with pytest.raises(CheckFailure, match=r"1 of 4 elements hold more bits than bf16 has \(np.float32\(0.1\) at "
                                           r"index \(1,\)\): the result was kept in float32"):
        assert_format(np.array([1.0, 0.1, 2.0, 0.0], np.float32), "bf16")
    with redacted(), pytest.raises(CheckFailure) as raised:
        assert_format(np.array([1.0, 0.1], np.float32), "bf16")
    assert "0.1" not in str(raised.value)


def test_a_failed_check_shows_in_a_notebook_as_its_message_without_the_graders_frames(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_cell("from aisys_grader import CheckFailure\n"
                   "def grader_frame():\n    raise CheckFailure('case 1: wrong')\n"
                   "grader_frame()")
    shown = capsys.readouterr().out
    assert "CheckFailure\x1b[0m: case 1: wrong" in shown and "grader_frame" not in shown


def test_an_error_the_students_code_raised_names_its_line_outside_hidden_cases():
    scope = {}
    exec(compile("import numpy as np\ndef f(x):\n    y = np.zeros(2)\n    return y[x]\n", "cell.py", "exec"), scope)
    student = InProcessStudent(scope)
    with pytest.raises(CheckFailure, match=r"^`f` raised IndexError: index 5 .* \(in f, line 4\)$"):
        student.call("f", 5, returns="number")
    with redacted(), pytest.raises(CheckFailure) as raised:
        student.call("f", 5, returns="number")
    assert "line 4" not in str(raised.value)


def test_case_on_ranks_names_the_rank_that_failed_first_on_its_own_account():
    ok = [{"value": 1, "error": None}, {"value": 2, "error": None}]
    failed = [{"error": "RuntimeError: Connection closed by peer"}, {"error": "ValueError: bad shape"}]
    assert case_on_ranks([ok], 0, "case 1") is ok
    with pytest.raises(CheckFailure, match=r"^case 1: rank 1 raised ValueError: bad shape"):
        case_on_ranks([failed], 0, "case 1")
    with pytest.raises(CheckFailure, match=r"^case 2: did not run \(an earlier case failed\)"):
        case_on_ranks([failed], 1, "case 2")
    with pytest.raises(CheckFailure, match=r"^case 1: 1 said ValueError: bad shape$"):
        case_on_ranks([failed], 0, "case 1", lambda rank, error: f"{rank} said {error}")
