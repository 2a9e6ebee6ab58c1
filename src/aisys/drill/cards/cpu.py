"""CPUs: the memory hierarchy and cache lines, cache coherence (MESI), false sharing, and which comparison sort suits
a cache (chapter 1's caches page)."""

import math

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.hardware import CHIPS, CPU_CACHE_LINE_BYTES, peak_formula

from ..card import Ask, Choice, Number, Several, card

CACHES = "01-architecture/caches"
ROOFLINE = "01-architecture/roofline"
EPYC = CHIPS["AMD EPYC 9654 (Genoa, 96 cores)"]
XEON = CHIPS["Intel Xeon Platinum 8480+ (Sapphire Rapids, 56 cores)"]
DOUBLE = int(bytes_per_element("fp64"))


@card(topic="architecture", difficulty="medium", frequency="high", page=CACHES)
def mesi_read_of_an_exclusive_line():
    options = ("A: Modified, B: Shared", "A: Shared, B: Shared", "A: Invalid, B: Exclusive", "A: Exclusive, B: Shared")
    return Ask(
        "Under the MESI protocol, core A holds a cache line in state Exclusive. Core B reads the same line. What "
        "are the two copies' states afterwards?",
        Choice(options, 1),
        "Exclusive means A has the only copy and it is clean (equal to memory). B's read miss is snooped (or "
        "looked up in the directory); A or memory supplies the clean line, and both copies become "
        "Shared: readable, clean, possibly in several caches. Had A's line been Modified, A would first write it "
        "back (or forward it), then both would be Shared.")


@card(topic="architecture", difficulty="easy", frequency="medium", page=CACHES)
def mesi_write_to_a_shared_line():
    options = ("A: Modified, B: Invalid", "A: Modified, B: Shared", "A: Exclusive, B: Shared",
               "A: Shared, B: Shared, with memory updated at once")
    return Ask(
        "Cores A and B both hold a line in state Shared. Core A writes to it. Under MESI, what are the states "
        "afterwards?",
        Choice(options, 0),
        "A write needs the only copy: A broadcasts an invalidation (a read-for-ownership or upgrade request), B's "
        "copy becomes Invalid, and A's becomes Modified, dirty, not yet written to memory. B's next read misses "
        "and fetches the line from A. Writes from several cores to one line therefore bounce it between caches.")


@card(topic="architecture", difficulty="easy", frequency="medium", page=CACHES)
def mesi_clean_states():
    options = ("Modified", "Exclusive", "Shared", "Invalid")
    return Ask(
        "In MESI, in which states does a cache hold a valid copy of a line that equals main memory (clean)?",
        Several(options, frozenset({1, 2})),
        "Modified: the only copy, dirty (memory is stale; it must be written back on eviction). Exclusive: the only "
        "copy, clean, so it can be written without telling anyone (it silently becomes Modified). Shared: clean, "
        "maybe in other caches too; a write must invalidate them first. Invalid: no data.")


@card(topic="architecture", difficulty="medium", frequency="high", page=CACHES)
def false_sharing_counters():
    per_line = CPU_CACHE_LINE_BYTES // DOUBLE
    return Ask(
        "Threads on different cores each add into their own double-precision accumulator, and the accumulators "
        f"sit next to each other in an array. How many threads' accumulators share one {CPU_CACHE_LINE_BYTES}-byte "
        "cache line?",
        Number(per_line, rel=0.01, unit="accumulators"),
        f"{CPU_CACHE_LINE_BYTES} / {DOUBLE} = {per_line} per line. Coherence works on lines, not bytes: every "
        f"write needs the line in Modified state, so the {per_line} cores take it from each other in turn (false "
        "sharing) although no two touch the same accumulator. Padding each to its own line "
        f"(alignas({CPU_CACHE_LINE_BYTES})), or summing in a local variable and writing once, makes them "
        "independent.")


@card(topic="architecture", difficulty="medium", frequency="medium", page=CACHES)
def coherence_at_scale():
    options = ("snooping: every miss is broadcast to every cache",
               "a directory that records which caches hold each line, so requests go only to them",
               "no coherence: software flushes caches explicitly",
               "write-through caches with no protocol")
    return Ask(
        "A system with many sockets and hundreds of cores must keep caches coherent. Which mechanism scales?",
        Choice(options, 1),
        "Snooping broadcasts each miss to every cache, traffic that grows with the number of cores times their "
        "misses; it suits one socket's ring or mesh with snoop filters. Large systems keep a directory (often in "
        "the home node's memory controller or the last-level cache) listing the sharers of each line, and send "
        "invalidations only to them. Write-through alone does not invalidate other copies.")


@card(topic="architecture", difficulty="easy", frequency="high", page=CACHES)
def cpu_memory_hierarchy_order():
    options = ("registers, L1, L2, L3, DRAM", "L1, registers, L2, DRAM, L3", "registers, L2, L1, L3, DRAM",
               "DRAM, L3, L2, L1, registers")
    return Ask(
        "Order a CPU's memory levels from fastest and smallest to slowest and largest.",
        Choice(options, 0),
        "Registers (in the core, no latency beyond the pipeline), L1 (per core, the smallest and fastest cache), "
        "L2 (per core, larger and slower), L3 (shared by the cores of a socket, larger and slower again), DRAM "
        f"(far slower to answer, with bandwidth such as {prose.rate(EPYC.memory_bandwidth, 'B/s')} for a DDR5 "
        f"socket of {EPYC.derivation['memory_bandwidth']}). Every level moves data in cache lines of "
        f"{CPU_CACHE_LINE_BYTES} bytes.")


@card(topic="architecture", difficulty="medium", frequency="medium", page=ROOFLINE)
def xeon_fp32_peak():
    formula = peak_formula(XEON.name, "fp32")
    return Ask(
        f"What is the FP32 peak of an {XEON.name} with AVX-512 ({formula.parts} {formula.part} per core, at the "
        "base clock), in TFLOP/s?",
        Number(formula.flops / 10**12, rel=0.03, unit="TFLOP/s"),
        f"{formula.explain()}: a unit does {formula.flops_per_clock // 2} FP32 lanes of FMA, and an FMA is 2 "
        "FLOPs. "
        f"Its memory delivers {prose.rate(XEON.memory_bandwidth, 'B/s')} "
        f"({XEON.derivation['memory_bandwidth']}), a ridge of {XEON.ridge_point('fp32'):.0f} FLOP/byte.")


@card(topic="sorting", difficulty="medium", frequency="high", page=CACHES)
def fastest_sort_with_caches():
    options = ("quicksort", "heapsort", "merge sort", "all three equally: they are all O(n log n)")
    return Ask(
        "Quicksort, heapsort and merge sort all take O(n log n) comparisons on average. Which is usually fastest "
        "on a CPU with caches, for an array of numbers much larger than the caches?",
        Choice(options, 0),
        "Quicksort's partition scans the array sequentially from both ends, in place: every cache line fetched is "
        "used whole, and the hardware prefetcher sees the streams. Once a partition fits in cache, its sub-sorts "
        "run from cache. Heapsort's sift-down jumps from i to 2i + 1: below the top levels of the heap every step "
        "is a cache miss. Merge sort streams too, but needs an n-element buffer and writes every element at every "
        "level. (Introsort, the C++ std::sort, is quicksort with a heapsort fallback.)")


@card(topic="sorting", difficulty="hard", frequency="low", page=CACHES)
def heapsort_cache_misses():
    n = 2**24
    size = int(bytes_per_element("fp64"))
    per_line = CPU_CACHE_LINE_BYTES // size
    depth = int(math.log2(n))
    top = int(math.log2(per_line + 1))  # the levels whose nodes all fit in the first line
    return Ask(
        "A binary heap holds 2^24 double-precision keys in an array. At most how many levels does one sift-down "
        "from the root descend (each step a potential cache miss)?",
        Number(depth, rel=0.01, unit="levels"),
        f"A heap of n = 2^24 keys is a complete binary tree of height floor(log2 n) = {depth}; sift-down moves one "
        f"level per step, from index i to 2i + 1 or 2i + 2, at most {depth} steps. A {CPU_CACHE_LINE_BYTES}-byte "
        f"line holds {per_line} keys: the top {top} levels "
        f"({2**top - 1} keys) share the first line, but from index {per_line - 1} on a child is a line or more away "
        "from its parent, so each further level touches a new line, and far from the root (beyond what the "
        f"caches hold) a miss. Quicksort's partition instead uses all {per_line} keys of every line it loads.")
