"""Sorting on a GPU: Batcher's bitonic network, its stages and comparisons, and the grid-wide barrier between stages
(the network of exercises/02-gpu-programming/bitonic_sort)."""

import math

from ..card import Ask, Choice, Number, card

PAGE = "exercises/02-gpu-programming/bitonic_sort"


def stages(n: int) -> int:
    """Compare-exchange stages of the bitonic network for n elements, padded to the next power of two: m(m+1)/2."""
    m = max(n - 1, 0).bit_length()
    return m * (m + 1) // 2


@card(topic="sorting", difficulty="easy", frequency="medium", page=PAGE)
def bitonic_stages():
    n = 1024
    m = int(math.log2(n))
    return Ask(
        f"How many compare-exchange stages does Batcher's bitonic network need to sort {n} elements?",
        Number(stages(n), rel=0.01, unit="stages"),
        f"For N = 2^m it merges runs of 2, 4, ..., N, and merging runs of 2^k takes k stages (compare elements "
        f"2^(k-1), ..., 2, 1 apart): 1 + 2 + ... + m = m(m+1)/2 = {m} x {m + 1} / 2 = {stages(n)} for m = {m}. Each "
        f"stage is {n // 2} independent compare-exchanges, one per pair.")


@card(topic="sorting", difficulty="medium", frequency="medium", page=PAGE)
def bitonic_comparisons_against_merge_sort():
    n = 1024
    network = stages(n) * n // 2
    merge = n * int(math.log2(n))
    return Ask(
        f"Sorting {n} elements, how many times as many comparisons does the bitonic network make as a merge sort's "
        "n log2 n?",
        Number(network / merge, rel=0.02, unit="x"),
        f"The network: {stages(n)} stages x {n // 2} compare-exchanges = {network:,}, about n (log2 n)^2 / 4. Merge "
        f"sort: {n} x {int(math.log2(n))} = {merge:,}. The network does {network / merge:.2f} times the work, but "
        "every stage is fully parallel and independent of the data, which is what a GPU wants.")


@card(topic="sorting", difficulty="medium", frequency="low", page=PAGE)
def bitonic_launches_for_padded_input():
    n = 100
    padded = 1 << (n - 1).bit_length()
    return Ask(
        f"A GPU bitonic sort launches one kernel per stage and pads its input to a power of two with +inf. How many "
        f"launches does it make for {n} elements?",
        Number(stages(n), rel=0.01, unit="launches"),
        f"{n} is padded to {padded} = 2^{padded.bit_length() - 1}; the padding sorts after every real element. "
        f"m(m+1)/2 = {stages(n)} stages, each a launch over the {padded} padded elements, and none for the "
        "padding's sake that a power-of-two input would not need.")


@card(topic="sorting", difficulty="hard", frequency="medium", page=PAGE)
def parallel_sort_depth():
    n = 2**20
    m = int(math.log2(n))
    return Ask(
        f"With one thread per element, how many parallel steps does the bitonic network take to sort n = 2^{m} "
        "elements?",
        Number(stages(n), rel=0.01, unit="steps"),
        f"Each stage is one parallel step: m(m+1)/2 = {stages(n)} for m = {m}, O(log^2 n). An O(log n)-depth "
        "sorting network exists (Ajtai, Komlos and Szemeredi) but its constant makes it useless in practice; "
        "GPU libraries use bitonic sort for small arrays in shared memory and radix sort (O(n) work, a few "
        "passes over the keys) for large ones.")


@card(topic="sorting", difficulty="medium", frequency="medium", page=PAGE)
def barrier_between_stages():
    options = ("__syncthreads() only waits for the threads of one block; the end of a launch waits for the whole "
               "grid", "a kernel may only run one stage of any algorithm", "launching is cheaper than a barrier",
               "shared memory is cleared between launches")
    return Ask(
        "Why does a GPU bitonic sort over a large array launch one kernel per stage instead of one kernel with "
        "__syncthreads() between stages?",
        Choice(options, 0),
        "Stage (k, j) pairs element i with i ^ j; for large j the partner belongs to another block, so every "
        "thread of the grid must see the previous stage's writes. __syncthreads() is a barrier for one block "
        "only; the end of a kernel launch is the grid-wide barrier (cooperative groups' grid.sync() is the other, "
        "limited to grids that fit on the GPU at once). Stages with j below the block size can run inside one "
        "block with __syncthreads(), which is how fast versions save launches.")
