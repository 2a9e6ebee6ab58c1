"""Checks: a set-associative LRU write-back cache simulator, against aisys.cpu_cache, exactly.

split_address: tag, set index and offset of hand-picked addresses (the offset and set bits' edges) and random ones.
geometry_refused: a line that is not a power of two, a size that is not a multiple of line * ways or gives a number
of sets that is not a power of two, a non-positive way count, each a ValueError naming the argument.
reads: read-only streams by hand (conflict misses in a direct-mapped cache, three lines thrashing a 2-way set, the
stream where LRU and FIFO differ, bytes of one line) and random streams on random geometries.
writes: write-back only of dirty lines (a line written three times is written back once), write-allocate, a write
hit refreshing LRU, the final flush; random read/write streams.
traversal: the student's row and column streams of a non-square matrix.
loop_nests: row against column traversal and naive against blocked matrix multiply (in two loop orders): the
lesson's property (row traversal misses once a line, blocked multiply a fraction of naive's misses) and the exact
counts. sorts: the traces of quicksort, merge sort and heapsort: exact counts, and quicksort moving the fewest bytes.
All counts are integers and compared exactly: the conventions fix each one.
"""

import re

import numpy as np

from aisys import cpu_cache
from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, describe, shown, unredacted

KEYS = ("hits", "misses", "evictions", "writebacks", "bytes_read", "bytes_written")
A, B, C = 0, 64, 128  # three lines of the only set of a 128-byte 2-way cache of 64-byte lines
ONE_SET = {"size": 128, "line": 64, "ways": 2}
HINTS = {
    "writebacks": "a write-back cache writes a line back once, when a dirty line is evicted or flushed at the end; "
                  "clean lines are dropped, and stores to a cached line only mark it dirty",
    "hits": "under LRU every hit (read or write) makes its line the most recent; the tag and set come from the "
            "block number address // line",
    "misses": "a write miss allocates (fills) the line like a read miss; the tag and set come from the block "
              "number address // line",
}


def _stream(addresses, writes=None) -> dict:
    addresses = np.asarray(addresses, dtype=np.int64)
    writes = np.zeros(addresses.shape, bool) if writes is None else np.asarray(writes, dtype=bool)
    return {"addresses": addresses, "writes": writes}


def _case(addresses, writes=None, **geometry) -> dict:
    return {**_stream(addresses, writes), **geometry}


def _reference(addresses, writes, size, line, ways):
    return cpu_cache.simulate(addresses, writes, size=size, line=line, ways=ways)


def _counts_compare(got, expected, case):
    if not isinstance(got, dict):
        raise CheckFailure(f"simulate should return a dict of the six counts, got {describe(got)}")
    missing = [key for key in KEYS if key not in got]
    if missing:
        raise CheckFailure(f"the result lacks {', '.join(missing)}")
    for key in KEYS:
        value = got[key]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise CheckFailure(f"{key} should be an int, got {describe(value)}")
    for key in KEYS:
        if got[key] != expected[key]:
            more = HINTS.get(key, "")
            raise CheckFailure(f"{key} is {shown(int(got[key]))}, expected " + unredacted(f"{expected[key]}",
                               "another value") + (f": {more}" if more else ""))


def _call(case) -> str:
    n, writes = len(case["addresses"]), int(np.sum(case["writes"]))
    return (f"simulate({n} accesses ({writes} writes), size={case['size']}, line={case['line']}, "
            f"ways={case['ways']})")


def _simulate_cases(student, cases, hidden, label=None):
    compare_cases(student, "simulate", cases, _reference, returns="mapping", hidden=hidden, compare=_counts_compare,
                  call=label or _call)


def _random_geometry(rng) -> dict:
    line = int(2 ** rng.integers(3, 7))
    ways = int(rng.integers(1, 5))
    sets = int(2 ** rng.integers(0, 4))
    return {"size": line * ways * sets, "line": line, "ways": ways}


def _random_stream(rng, geometry, count, write_fraction):
    span = geometry["size"] * 3  # three times the cache: hits, conflict and capacity misses all happen
    addresses = rng.integers(0, span, count)
    return _case(addresses, rng.random(count) < write_fraction, **geometry)


@check(points=1)
def split_address(student, rng, hidden):
    """split_address(address, size, line, ways): [tag, set_index, offset], the block address // line split into
    its low set bits and the tag above."""
    geometry = {"size": 32768, "line": 64, "ways": 8}  # 64 sets: offset bits 0-5, set bits 6-11, tag from bit 12
    cases = [{"address": a, **geometry} for a in (0, 63, 64, 4095, 4096, 4160, 123456789)]
    cases += [{"address": 1000, "size": 256, "line": 16, "ways": 16},  # one set: the tag is the block
              {"address": 1000, "size": 256, "line": 16, "ways": 1}]  # direct-mapped, 16 sets
    if hidden:
        for _ in range(12):
            g = _random_geometry(rng)
            cases.append({"address": int(rng.integers(0, 2**40)), **g})
    compare_cases(student, "split_address", cases,
                  lambda address, size, line, ways: cpu_cache.split_address(address, size=size, line=line, ways=ways),
                  returns="list",
                  hidden=hidden, tolerance=(0, 0),  # integers: exact
                  hint=lambda case, got, expected: "the block is address // line; set = block % sets, tag = "
                                                   "block // sets (every bit above the set bits)")


@check(points=1)
def geometry_refused(student, rng, hidden):
    """An impossible geometry raises ValueError naming the argument at fault (through the notebook's refusal
    helper, for both simulate and split_address)."""
    cases = [((192, 48, 1), "line", "a line of 48 bytes is not a power of two"),
             ((1000, 64, 2), "size", "1000 is not a multiple of line * ways = 128"),
             ((384, 64, 2), "size", "384 / (64 * 2) = 3 sets, not a power of two"),
             ((128, 64, 0), "ways", "a cache needs at least one way"),
             ((0, 64, 1), "size", "a cache of 0 bytes")]
    if hidden:
        cases += [((3 * 2**10, 24, 2), "line", "a line of 24 bytes is not a power of two"),
                  ((96 * 64, 64, 4), "size", "96 * 64 / (64 * 4) = 24 sets, not a power of two"),
                  ((4096, 64, -2), "ways", "a negative way count")]
    for function in ("simulate", "split_address"):
        for args, name, why in cases:
            call = function + unredacted(f"(..., size={args[0]}, line={args[1]}, ways={args[2]})",
                                         "(a hidden geometry)")
            why = unredacted(why, "see the notebook's conventions")
            got = student.call("refusal", function, *(((0,) + args) if function == "split_address" else args),
                               returns="any")
            if got is None:
                raise CheckFailure(f"{call} returned; it should raise ValueError naming {name}: {why}")
            if not (isinstance(got, list) and len(got) == 2 and got[0] == "ValueError"):
                raise CheckFailure(f"{call} raised {shown(got[0] if isinstance(got, list) and got else got)}; it "
                                   f"should raise ValueError naming {name}: {why}")
            if not re.search(rf"\b{name}\b", str(got[1])):
                raise CheckFailure(f"{call} raised ValueError, but its message should name the argument `{name}` "
                                   f"({why})" + unredacted(f"; it says {got[1]!r}"))


@check(points=2)
def reads(student, rng, hidden):
    """Read-only streams: hits, misses and evictions exactly, LRU replacement, conflict misses, no write-backs."""
    direct = {"size": 256, "line": 64, "ways": 1}  # 4 sets: 0 and 256 share set 0
    cases = [_case([0, 256, 0, 256], **direct),  # conflict misses: 4 misses though the cache is nearly empty
             _case([0, 256, 0, 256], size=256, line=64, ways=2),  # 2 ways: both fit
             _case([A, B, C] * 3, **ONE_SET),  # three lines cycling through a 2-way set: LRU misses every time
             _case([A, B, A, C, A], **ONE_SET),  # LRU evicts B (2 hits); FIFO would evict A (1 hit)
             _case([0, 8, 63, 64, 127, 128, 0], **direct)]  # bytes of one line share it
    if hidden:
        cases += [_random_stream(rng, _random_geometry(rng), 300, 0.0) for _ in range(6)]
        cases += [_case([0, 4096, 8192, 0, 4096, 8192], size=32768, line=64, ways=2)]  # 3 lines, 2 ways, 1 set
    _simulate_cases(student, cases, hidden)


@check(points=2)
def writes(student, rng, hidden):
    """Write-back of dirty lines only, write-allocate, LRU refreshed by write hits, and the final flush."""
    cases = [_case([A, A, A, B, C], [True, True, True, False, False], **ONE_SET),  # 3 stores, 1 write-back
             _case([A, B, C, A], [True, False, False, False], **ONE_SET),  # dirty A evicted; clean B evicted
             _case([A, B, A, C, A], [False, False, True, False, False], **ONE_SET),  # the write hit refreshes A
             _case([A, A], [True, False], **ONE_SET),  # the write miss allocates: the read hits
             _case([A], [True], **ONE_SET),  # only the flush writes A back
             _case([0, 256, 512], [True, True, False], size=256, line=64, ways=1)]  # conflict evicts dirty 0
    if hidden:
        cases += [_random_stream(rng, _random_geometry(rng), 300, float(rng.uniform(0.1, 0.9))) for _ in range(6)]
    _simulate_cases(student, cases, hidden)


@check(points=1)
def traversal(student, rng, hidden):
    """traversal(rows, cols, order, itemsize): the row-major matrix's byte addresses in row or column order."""
    cases = [{"rows": r, "cols": c, "order": o, "itemsize": s}
             for r, c, s in ((2, 3, 4), (5, 7, 8), (1, 4, 2)) for o in ("row", "column")]
    if hidden:
        cases += [{"rows": int(rng.integers(1, 12)), "cols": int(rng.integers(1, 12)), "order": o,
                   "itemsize": int(rng.choice([1, 2, 4, 8]))} for o in ("row", "column") for _ in range(3)]
    compare_cases(student, "traversal", cases, lambda rows, cols, order, itemsize: cpu_cache.traversal(
        rows, cols, order, itemsize), returns="array", hidden=hidden, tolerance=(0, 0), dtype="int64",  # exact
        hint=lambda case, got, expected: "element (i, j) of a row-major rows x cols matrix lies at (i * cols + j) "
                                         "* itemsize, whichever order visits it")


def _rate(result) -> float:
    total = result["hits"] + result["misses"]
    return result["misses"] / total if total else 0.0


def _got_counts(student, case, label):
    got = student.call("simulate", **case, returns="mapping")
    expected = _reference(**case)
    try:
        _counts_compare(got, expected, case)
    except CheckFailure as failure:
        raise CheckFailure(f"{label}: {failure}") from None
    return got


@check(points=2)
def loop_nests(student, rng, hidden):
    """Row against column traversal, and naive against blocked matrix multiply: the exact counts, and what they
    show (a row walk misses once a line; tiles cut the misses of the i-j-k multiply several times)."""
    cache = {"size": 1024, "line": 64, "ways": 4}  # 16 lines; a 32 x 24 float64 matrix is 6 KiB, 3 lines a row
    row = _got_counts(student, _case(cpu_cache.traversal(32, 24, "row"), **cache), "row traversal of 32 x 24")
    column = _got_counts(student, _case(cpu_cache.traversal(32, 24, "column"), **cache),
                         "column traversal of 32 x 24")
    if not row["misses"] * 8 == 32 * 24 <= column["misses"]:  # 8 doubles a line: one miss each; a column: each
        raise CheckFailure("row order should miss once per 64-byte line (every 8th double) and column order on "
                           "every access (a column's 32 lines exceed the 16 the cache holds)")
    n, tile = 8, 4  # three 4 x 4 tiles of doubles (12 of 16 lines at most) fit; three 8 x 8 matrices do not
    geometry = {"size": 512, "line": 32, "ways": 4} if not hidden else {"size": 512, "line": 64, "ways": 4}
    results = {}
    for order in ("ijk", "ikj") if not hidden else ("ijk", "jki"):
        for block in (None, tile):
            results[order, block] = _got_counts(student, _case(*cpu_cache.matmul(n, order, block), **geometry),
                                                f"matmul(n={n}, order={order!r}, block={block})")
    naive, blocked = results["ijk", None], results["ijk", tile]
    if not _rate(blocked) * 2 < _rate(naive):
        raise CheckFailure(f"{tile} x {tile} tiles should cut the i-j-k multiply's miss rate at least in half "
                           "(three tiles fit the cache, so each element loaded is reused a tile's width times)")


@check(points=2)
def sorts(student, rng, hidden):
    """The element traces of quicksort, merge sort and heapsort: exact counts, and quicksort moves the fewest
    bytes (in place, sequential partitions that end up in cache)."""
    n, seed = (128, 0) if not hidden else (160, 7)  # fixed inputs: the traces do not depend on the check's seed
    # the arrays (1 KiB, 1.25 KiB of doubles) are 4 and 2.5 times the caches
    geometry = {"size": 256, "line": 64, "ways": 2} if not hidden else {"size": 512, "line": 32, "ways": 2}
    values = np.random.default_rng(seed).permutation(n)
    traffic = {}
    for algorithm in cpu_cache.SORTS:
        addresses, writes, _ = cpu_cache.sort_trace(values, algorithm)
        got = _got_counts(student, _case(addresses, writes, **geometry), f"{algorithm} of {n} doubles")
        traffic[algorithm] = got["bytes_read"] + got["bytes_written"]
    if min(traffic, key=traffic.get) != "quicksort":
        raise CheckFailure("quicksort should move the fewest bytes: its partitions scan lines sequentially in "
                           "place, and once a partition fits in the cache it is sorted there")
