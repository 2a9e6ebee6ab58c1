"""compare's messages inside `redacted()`: kinds, shapes, positions and errors, never a value of a case or a student's.

Outside `redacted()` the same calls show the values, as visible cases always did.
"""

import numpy as np
import pytest

from aisys_grader import CheckFailure, InProcessStudent, assert_close
from aisys_grader.compare import describe, raised, redacted, redacting, shown, unredacted


def failure(got, expected, **kwargs) -> str:
    with pytest.raises(CheckFailure) as caught:
        assert_close(got, expected, **kwargs)
    return str(caught.value)


def test_redacted_nests_and_is_off_outside():
    assert not redacting()
    with redacted():
        assert redacting()
        with redacted(False):  # nesting never turns it off
            assert redacting()
    with redacted(False):
        assert not redacting()


def test_describe_gives_kind_and_size_only():
    secret = np.array([[1.2345, -6.789], [3.25, 1e-3]], np.float32)
    with redacted():
        assert describe(secret) == "array(shape=(2, 2), dtype=float32)"
        assert describe("a secret prompt") == "a string of 15 characters"
        assert describe([5, 2, 9]) == "a list of 3 items"
        assert describe({"block_table": [5, 2]}) == "a mapping of 1 keys"
        assert describe(123456) == "an integer" and describe(0.7) == "a number" and describe(None) == "None"
    assert "1.234" in describe(secret) and describe(123456) == "123456"


def test_shown_unredacted_and_raised():
    assert shown(0.123456, ".3g") == "0.123" and shown("fp16", "!r") == "'fp16'" and shown([1, 2]) == "[1, 2]"
    assert unredacted("x = 42", "x") == "x = 42"
    assert raised("KeyError: 'secret 42' (at cell.py:3 in f)") == "KeyError: 'secret 42' (at cell.py:3 in f)"
    with redacted():
        assert shown(0.123456, ".3g") == "a number" and shown("fp16", "!r") == "a string of 4 characters"
        assert unredacted("x = 42", "x") == "x"
        assert raised("KeyError: 'secret 42' (at cell.py:3 in f)").startswith("KeyError (its message is not shown")
        assert raised("MyLeak 42: secret").startswith("an exception (")  # a student's class name is theirs


def test_numbers_show_relative_error_not_values():
    inside = None
    with redacted():
        inside = failure(12345.678, 12300.5, where="result")
    assert "relative error" in inside
    assert "12345" not in inside and "12300" not in inside and "1.23e+04" not in inside
    assert "expected 12300.5, got 12345.678" in failure(12345.678, 12300.5)
    with redacted():
        exact = failure(98765, 98764)
    assert "98765" not in exact and "98764" not in exact


def test_strings_are_not_quoted():
    with redacted():
        message = failure("memory-secret", "compute-secret")
    assert message == "result: differs from the reference"
    with redacted():
        kind = failure(3.5, "compute-secret")  # a wrong kind: described, not shown
    assert "compute-secret" not in kind and "3.5" not in kind and "a string of 14 characters" in kind


def test_mappings_name_the_expected_keys_not_the_students():
    with redacted():
        message = failure({"flops": 1, "leaked 31337": 2}, {"flops": 1, "bytes": 2})
    assert "missing ['bytes']" in message and "2 keys" in message and "31337" not in message
    assert "'leaked 31337'" in failure({"flops": 1, "leaked 31337": 2}, {"flops": 1, "bytes": 2})
    with redacted():
        nested = failure({"flops": 7.25, "bytes": 2}, {"flops": 7.5, "bytes": 2})
    assert "result['flops']" in nested and "7.25" not in nested and "7.5" not in nested


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_arrays_show_where_and_how_much_not_values(dtype):
    expected = np.array([[101, 202, 303], [404, 505, 606]], dtype)
    got = expected.copy()
    got[1, 2] = 999
    with redacted():
        message = failure(got, expected)
    assert "1 of 6 elements differ" in message and "index (1, 2)" in message and "shape (2, 3)" in message
    assert not any(str(v) in message for v in (101, 202, 505, 606, 999))
    assert "999" in failure(got, expected)
    with redacted():
        shape = failure(got[:1], expected)
    assert "expected shape (2, 3), got shape (1, 3)" in shape


def test_a_students_exception_text_is_withheld():
    class Leak(Exception):
        pass

    def raises_value_error(x):
        raise ValueError(f"cannot handle {x.tolist()}")

    def raises_own(x):
        raise Leak(f"{x.tolist()}")

    student = InProcessStudent({"f": raises_value_error, "g": raises_own})
    secret = np.array([31337.5, 27182.8])
    with redacted(), pytest.raises(CheckFailure) as caught:
        student.call("f", x=secret)
    assert "raised ValueError" in str(caught.value) and "31337" not in str(caught.value)
    with redacted(), pytest.raises(CheckFailure) as caught:
        student.call("g", x=secret)
    assert "Leak" not in str(caught.value) and "31337" not in str(caught.value)
    with pytest.raises(CheckFailure, match="raised ValueError: cannot handle \\[31337.5"):
        student.call("f", x=secret)
