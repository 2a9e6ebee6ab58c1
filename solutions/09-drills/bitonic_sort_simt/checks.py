"""Checks: a bitonic sort in one block's shared memory, right, race-free, touching global memory once per element.

Values are compared exactly with np.sort (sorting moves values, never rounds them). Hidden cases add the
edges: one and two elements, reversed and sorted input, many duplicates, +-inf, -0.0 and 0.0, and a property
check on random powers of two up to 32 (shrunk to the smallest failing array). The report checks run the
student's bitonic_sort in the simulator and compare with the reference
(aisys.cuda_kernels.bitonic_sort.bitonic_sort_block) on the same length: one launch of one block of n
threads, no race or barrier error, and no more global load and store instructions than the reference's.
"""

import math
from functools import cache

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.cuda_kernels import bitonic_sort as reference

from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import CheckFailure
from aisys_grader.launches import errors_message, lines, profiled, reference_launches, where

PATTERN_SIZE = 128  # the report checks' length: seven k's, 28 stages, four warps
# Small integers with repeats, and the infinities: ties and the extremes are where a network goes wrong.
ELEMENTS = st.one_of(st.integers(-4, 4).map(float), st.sampled_from([np.inf, -np.inf, -0.0]))
ARRAYS = st.integers(0, 5).flatmap(lambda m: hnp.arrays(np.float32, 2**m, elements=ELEMENTS))


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


def _special(rng) -> np.ndarray:
    """The same values on every seed, shuffled by it: infinities, signed zeros, repeats."""
    x = np.array([np.inf, -np.inf, -0.0, 0.0, 1, -1, 1, 3.5, -2, np.inf, 0.0, -0.0, 7, -7, 2, 2], np.float32)
    return rng.permutation(x)


def _hint(case, got, expected) -> str:
    if np.shape(got) == expected.shape and np.array_equal(np.sort(got), expected) and np.array_equal(
            got, expected[::-1]):
        return ("Your result is sorted descending: at the last k = n, i & n is 0 for every thread, so every pair "
                "must go ascending there")
    return ""


@check(points=3)
def bitonic_sort(student, rng, hidden):
    """bitonic_sort(x) returns np.sort(x) exactly, for every power of two n from 1 up."""
    cases = [_array(rng, 8), _array(rng, 64, "duplicates"), _array(rng, 256)]
    if hidden:
        cases = [_array(rng, 1), _array(rng, 2, "reversed"), _array(rng, 4, "reversed"), _special(rng),
                 _array(rng, 32, "duplicates"), _array(rng, 64, "sorted"), _array(rng, 128, "reversed"),
                 _array(rng, 2 ** int(rng.integers(3, 9)))]
    compare_cases(student, "bitonic_sort", [{"x": x} for x in cases], _sorted, returns="array", hidden=hidden,
                  tolerance=(0.0, 0.0), dtype="float32", hint=_hint)
    if hidden:
        compare_property(student, "bitonic_sort", st.fixed_dictionaries({"x": ARRAYS}), _sorted, rng=rng,
                         returns="array", hidden=hidden, tolerance=(0.0, 0.0), dtype="float32", examples=10)


def _launches(student, rng, n: int) -> list[dict]:
    """The student's reports on n float32 elements; CheckFailure on a race or barrier error, or a wrong result."""
    x = _array(rng, n)
    value, launches = profiled(student, "bitonic_sort", x=x, returns="array")
    if error := errors_message(launches):
        raise CheckFailure(
            f"on {n} float32 elements, {error}. Each stage reads what other threads wrote in the stage before: "
            f"cuda.syncthreads() between every two stages (after the load, and before the write-back too), "
            f"outside the `if` of the compare-exchange, so that every thread of the block reaches it")
    if np.shape(value) != x.shape or not np.array_equal(value, np.sort(x)):
        raise CheckFailure(f"on {n} float32 elements, bitonic_sort returned a wrong result (the check "
                           f"`bitonic_sort` says more); its launch reports are graded only when it is right")
    return launches


@check(points=1)
def bitonic_sort_race_free(student, rng, hidden):
    """No shared-memory race and no barrier error."""
    for n in (2 ** int(rng.integers(2, 7)), PATTERN_SIZE) if hidden else (16, PATTERN_SIZE):
        _launches(student, rng, n)


@cache
def _reference_launches(n: int) -> list[dict]:
    """The reference's reports on n float32 elements (the counts here do not depend on the values)."""
    return reference_launches(reference.bitonic_sort_block, np.zeros(n, np.float32))


@check(points=2)
def bitonic_sort_in_shared_memory(student, rng, hidden):
    """One launch of one block of n threads, the stages in shared memory: global memory read and written once per
    element, as in the reference."""
    n = PATTERN_SIZE
    launches = _launches(student, rng, n)
    configurations = [(math.prod(launch["grid"]), math.prod(launch["block"])) for launch in launches]
    if configurations != [(1, n)]:
        raise CheckFailure(
            f"on {n} float32 elements, bitonic_sort made {len(launches)} launch(es) of (blocks, threads per block) "
            f"{configurations}; the drill sorts in one launch of one block of n = {n} threads, "
            f"bitonic_sort_kernel[1, n](a), its barriers separating the stages (a barrier only waits for the "
            f"threads of one block)")
    mine = sum(line["requests"] for line in lines(launches, "global"))
    theirs = sum(line["requests"] for line in lines(_reference_launches(n), "global"))
    if mine > theirs:
        busiest = max(lines(launches, "global"), key=lambda line: line["requests"])
        raise CheckFailure(
            f"on {n} float32 elements, your kernel issued {mine} global load and store instructions (warp-level), "
            f"the reference {theirs}; the busiest is {where(busiest)} ({busiest['kind']}, {busiest['requests']}). "
            f"Load the array into a shared array once, s[i] = a[i], run all {reference.stages(n)} stages on s, "
            f"and write a[i] = s[i] once at the end: shared memory is on the chip, global memory a round trip "
            f"to DRAM (or L2) at every stage")
