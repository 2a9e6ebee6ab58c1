"""Checks: an odd-even transposition sort in one block, right for any n, race-free, in shared memory.

Values are compared exactly with np.sort (sorting moves values, never rounds them). Hidden cases add the
edges: one, two and three elements, odd and even n, reversed input (which needs all n phases), many
duplicates, and the largest values (+inf, the largest float32) at the front of odd- and even-length arrays,
which a compare past the last element drags out of the array; then a property check on random arrays of up
to 16 elements (shrunk to the smallest failing one). The report checks run the student's odd_even_sort in
the simulator and compare with the reference (aisys.cuda_kernels.odd_even_sort) on the same length: one
launch of one block of n threads, no race or barrier error, no more global load and store instructions.
"""

import math
from functools import cache

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.cuda_kernels import odd_even_sort as reference

from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import CheckFailure
from aisys_grader.launches import errors_message, lines, profiled, reference_launches, where

PATTERN_SIZE = 45  # the report checks' length: odd, two warps, the second one ragged
BIGGEST = np.finfo(np.float32).max
# Small integers with repeats, and the extremes: ties, infinities and the largest float are where it goes wrong.
ELEMENTS = st.one_of(st.integers(-4, 4).map(float), st.sampled_from([np.inf, -np.inf, float(BIGGEST), -0.0]))
ARRAYS = hnp.arrays(np.float32, st.integers(1, 16), elements=ELEMENTS)


def _sorted(x):
    return np.sort(x)


def _array(rng, n, order="random") -> np.ndarray:
    x = rng.integers(-3, 4, n) if order == "duplicates" else rng.standard_normal(n) * 100
    x = x.astype(np.float32)
    if order == "sorted":
        return np.sort(x)
    if order == "reversed":
        return np.sort(x)[::-1].copy()
    return x


def _largest_first(rng, n) -> np.ndarray:
    """The largest values at the front: they walk to the last element, where a compare past the end swaps them out."""
    return np.concatenate([[np.inf, BIGGEST], rng.standard_normal(n - 2) * 100]).astype(np.float32)


def _one_phase_short(got, expected) -> bool:
    """Whether one more phase, odd or even, would sort `got`: what n - 1 phases leave."""
    for start in (0, 1):
        fixed = got.copy()
        for i in range(start, fixed.size - 1, 2):
            if fixed[i] > fixed[i + 1]:
                fixed[i], fixed[i + 1] = fixed[i + 1], fixed[i]
        if np.array_equal(fixed, expected):
            return True
    return False


def _hint(case, got, expected) -> str:
    x = case["x"]
    if np.shape(got) != expected.shape:
        return ""
    if x.size > 2 and np.array_equal(np.sort(got), expected) and _one_phase_short(got, expected):
        return ("One more phase would sort your result: n elements need n phases (n in reverse order need every "
                "one of them)")
    if not np.array_equal(np.sort(got), expected) and np.isin(x, [np.inf, BIGGEST]).any():
        return ("Your result holds values that are not in x, and lost some of the largest: the last element has no "
                "right neighbour, and a compare with s[n], past the end of the array, swaps the largest value out")
    return ""


@check(points=3)
def odd_even_sort(student, rng, hidden):
    """odd_even_sort(x) returns np.sort(x) exactly, for any n from 1 to BLOCK_MAX."""
    cases = [_array(rng, 10), _array(rng, 7, "reversed"), _largest_first(rng, 13)]
    if hidden:
        cases = [_array(rng, 1), _array(rng, 2, "reversed"), _array(rng, 3, "reversed"), _largest_first(rng, 3),
                 _largest_first(rng, 16), _largest_first(rng, 33), _array(rng, 32, "reversed"),
                 _array(rng, 33, "duplicates"), _array(rng, 40, "sorted"), _array(rng, int(rng.integers(4, 64)))]
    compare_cases(student, "odd_even_sort", [{"x": x} for x in cases], _sorted, returns="array", hidden=hidden,
                  tolerance=(0.0, 0.0), dtype="float32", hint=_hint)
    if hidden:
        compare_property(student, "odd_even_sort", st.fixed_dictionaries({"x": ARRAYS}), _sorted, rng=rng,
                         returns="array", hidden=hidden, tolerance=(0.0, 0.0), dtype="float32", examples=12)


def _launches(student, rng, n: int) -> list[dict]:
    """The student's reports on n float32 elements; CheckFailure on a race or barrier error, or a wrong result."""
    x = _array(rng, n, "reversed")
    value, launches = profiled(student, "odd_even_sort", x=x, returns="array")
    if error := errors_message(launches):
        raise CheckFailure(
            f"on {n} float32 elements, {error}. Each phase reads what the neighbours wrote in the phase before: "
            f"cuda.syncthreads() between every two phases (after the load, and before the write-back too), "
            f"outside the `if` of the compare-exchange, so that every thread of the block reaches it")
    if np.shape(value) != x.shape or not np.array_equal(value, np.sort(x)):
        raise CheckFailure(f"on {n} float32 elements, odd_even_sort returned a wrong result (the check "
                           f"`odd_even_sort` says more); its launch reports are graded only when it is right")
    return launches


@check(points=1)
def odd_even_sort_race_free(student, rng, hidden):
    """No shared-memory race and no barrier error, for odd and even n."""
    for n in (int(rng.integers(4, 40)), PATTERN_SIZE) if hidden else (16, PATTERN_SIZE):
        _launches(student, rng, n)


@cache
def _reference_launches(n: int) -> list[dict]:
    """The reference's reports on n float32 elements (the counts here do not depend on the values)."""
    return reference_launches(reference.odd_even_sort, np.zeros(n, np.float32))


@check(points=1)
def odd_even_sort_in_shared_memory(student, rng, hidden):
    """One launch of one block of n threads, the phases in shared memory: global memory read and written once per
    element, as in the reference."""
    n = PATTERN_SIZE
    launches = _launches(student, rng, n)
    configurations = [(math.prod(launch["grid"]), math.prod(launch["block"])) for launch in launches]
    if configurations != [(1, n)]:
        raise CheckFailure(
            f"on {n} float32 elements, odd_even_sort made {len(launches)} launch(es) of (blocks, threads per "
            f"block) {configurations}; the drill sorts in one launch of one block of n = {n} threads, "
            f"odd_even_sort_kernel[1, n](a), its barriers separating the phases")
    mine = sum(line["requests"] for line in lines(launches, "global"))
    theirs = sum(line["requests"] for line in lines(_reference_launches(n), "global"))
    if mine > theirs:
        busiest = max(lines(launches, "global"), key=lambda line: line["requests"])
        raise CheckFailure(
            f"on {n} float32 elements, your kernel issued {mine} global load and store instructions (warp-level), "
            f"the reference {theirs}; the busiest is {where(busiest)} ({busiest['kind']}, {busiest['requests']}). "
            f"Load the array into a shared array once, s[i] = a[i], run all {n} phases on s, and write "
            f"a[i] = s[i] once at the end: shared memory is on the chip, global memory a round trip to DRAM (or "
            f"L2) at every phase")
