"""Checks: a bitonic network, one kernel launch per stage, any length by padding.

The correctness checks compare with np.sort exactly, on float32 and int32:
random values with negatives, many duplicates, already sorted and reversed
input. Powers of two test the network alone; other lengths (0, 3, 31, 33,
1000, 1025 and seeded ones) test the padding too. The launch check runs
bitonic_sort in the simulator: no error in any launch, and exactly one launch
per stage of the padded network, m (m + 1) / 2 for 2**m elements, as the
reference makes. (A shared-memory version that runs several stages in one
launch is a fine optimisation, but this exercise is about the grid-wide
barrier that the end of a launch provides, so the check counts the launches
of the plain version, which the notebook asks for.)
"""

import numpy as np

from aisys.cuda_kernels import bitonic_sort as reference

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure
from aisys_grader.launches import errors_message


ORDERS = ("random", "duplicates", "sorted", "reversed", "positive")


def _array(rng, n: int, dtype, order: str = "random") -> np.ndarray:
    dtype = np.dtype(dtype)
    if order == "duplicates":
        x = rng.integers(-3, 4, n)
    elif order == "positive":
        x = rng.uniform(1, 1000, n) if dtype.kind == "f" else rng.integers(1, 2**31 - 1, n)
    else:
        x = rng.standard_normal(n) * 100 if dtype.kind == "f" else rng.integers(-2**31, 2**31 - 1, n)
    x = x.astype(dtype)
    if order == "sorted":
        x = np.sort(x)
    elif order == "reversed":
        x = np.sort(x)[::-1].copy()
    return x


def _sorts(student, arrays: list, hidden: bool) -> None:
    """bitonic_sort(x) equals np.sort(x) exactly (sorting moves values, it never rounds them), in x's dtype."""
    __tracebackhide__ = True
    compare_cases(student, "bitonic_sort", [{"x": x} for x in arrays], lambda x: np.sort(x), returns="array",
                  hidden=hidden, tolerance=(0.0, 0.0), dtype="reference", hint=_dtype_hint)


def _dtype_hint(case, got, expected) -> str:
    return "A sorted copy keeps the dtype of x" if got.dtype != expected.dtype else ""


def _random_cases(rng, sizes) -> list:
    """Each size with a seeded dtype and kind of data."""
    return [_array(rng, n, reference.DTYPES[int(rng.integers(len(reference.DTYPES)))], str(rng.choice(ORDERS)))
            for n in sizes]


@check(points=2)
def bitonic_sort_power_of_two(student, rng, hidden):
    """bitonic_sort(x) sorts float32 and int32 arrays whose length is a power of two, like np.sort."""
    cases = [_array(rng, 16, np.int32), _array(rng, 256, np.float32)]
    if hidden:
        cases = [_array(rng, 1, np.float32), _array(rng, 2, np.int32, "reversed"),
                 _array(rng, 4, np.float32, "reversed"), _array(rng, 32, np.int32, "duplicates"),
                 _array(rng, 64, np.float32, "sorted"), _array(rng, 128, np.int32, "reversed"),
                 _array(rng, 512, np.float32, "duplicates")]
        cases += _random_cases(rng, [2 ** int(rng.integers(3, 9))])
    _sorts(student, cases, hidden)


@check(points=3)
def bitonic_sort_any_length(student, rng, hidden):
    """bitonic_sort(x) sorts arrays of any length, padding to a power of two with values that sort last."""
    cases = [_array(rng, 3, np.int32), _array(rng, 33, np.float32, "positive"), _array(rng, 100, np.int32)]
    if hidden:
        cases = [_array(rng, 0, np.float32), _array(rng, 3, np.float32, "reversed"),
                 _array(rng, 31, np.int32, "positive"), _array(rng, 33, np.float32, "duplicates"),
                 _array(rng, 100, np.int32, "sorted"), _array(rng, 1000, np.float32),
                 _array(rng, 1025, np.int32, "positive")]
        cases += _random_cases(rng, [int(rng.integers(5, 300)) | 1])  # odd: never a power of two
    _sorts(student, cases, hidden)


@check(points=2)
def bitonic_sort_launches(student, rng, hidden):
    """bitonic_sort makes one kernel launch per stage of the network, m (m + 1) / 2 for 2**m padded elements."""
    sizes = [100]
    if hidden:
        sizes = [1, int(rng.integers(2, 200)), 2 ** int(rng.integers(2, 8))]
    for n in sizes:
        x = _array(rng, n, np.float32)
        _, launches = student.profiled_call("bitonic_sort", x=x, returns="array")  # no launch is right for n = 1
        error = errors_message(launches)
        if error:
            raise CheckFailure(f"bitonic_sort of {n} float32 elements: {error}")
        expected = reference.stages(n)
        if len(launches) != expected:
            size = 1 << max(n - 1, 0).bit_length()
            m = size.bit_length() - 1
            raise CheckFailure(
                f"bitonic_sort of {n} float32 elements made {len(launches)} kernel launches; padded to "
                f"{size} = 2**{m} elements, the network has m (m + 1) / 2 = {expected} stages (k = 2, 4, ..., {size}; "
                f"for each k, j = k/2, ..., 1), and each stage must see every write of the stage before it, across "
                f"the whole grid: one launch per stage, no more and no fewer"
                + (" (a single element is already sorted: no launch at all)" if n == 1 else ""))
