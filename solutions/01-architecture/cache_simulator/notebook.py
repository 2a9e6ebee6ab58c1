# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a cache simulator
#
# **You will learn** how a set-associative cache splits an address into tag, set index and offset, which accesses
# hit, which line LRU evicts, and when a write-back cache writes to memory, by writing a simulator and driving it
# with the address streams of loop nests and sorts: row against column traversal of a matrix, naive against
# blocked matrix multiply, quicksort against merge sort and heapsort. The counts you get are the traffic that
# decides the speed of those loops on a real CPU (Hennessy & Patterson, *Computer Architecture*, 6th ed.,
# appendix B.1 to B.3 and section 2.2; Drepper, *What Every Programmer Should Know About Memory*, 2007, sections
# 3.2 and 6.2).
#
# **The conventions, all of them** (they are `aisys.cpu_cache`'s, which the checks compare with exactly):
# - **Geometry.** A cache of `size` bytes holds lines of `line` bytes, `ways` lines per set: `sets = size // (line
#   * ways)`. `size`, `line` and `ways` are positive Python ints; `line` must be a power of two, `size` a multiple
#   of `line * ways`, and `sets` a power of two. Otherwise raise `ValueError` whose message names the argument at
#   fault as a word: `line` for a line that is not a power of two, `size` for a size that is not a multiple of
#   `line * ways` or gives a number of sets that is not a power of two, and the argument's own name for one that is
#   not a positive int. Check in that order: a non-positive argument first, then `line`, then `size`.
# - **Address split.** A byte address `a` (a non-negative int) lies in memory block `a // line`, at offset
#   `a % line` in it; the block goes to set `block % sets` (the set index: the address bits just above the offset)
#   with tag `block // sets` (all the bits above those). Two addresses hit the same line exactly when their blocks
#   are equal.
# - **Replacement: LRU.** Every access that finds its line (a hit, read or write) and every line filled makes that
#   line the most recently used of its set; a miss in a full set evicts the least recently used line.
# - **Write-back, write-allocate.** A write miss fills the line like a read miss, then the write marks it dirty. A
#   dirty line is written to the next level when it is evicted; a clean one is dropped. At the end of the stream
#   the cache is **flushed**: every line still dirty is written back then, and counted like a write-back on
#   eviction (so every store reaches memory). The flush evicts nothing.
# - **Traffic** is in whole lines: every miss reads one line from the next level, every write-back writes one.
# - `simulate(addresses, writes, size, line, ways)` takes `addresses`, a 1-d int64 array of byte addresses in
#   program order, and `writes`, a bool array of the same length (`True` for a store), and returns a dict of six
#   Python ints: `"hits"`, `"misses"` (hits + misses = accesses), `"evictions"` (valid lines replaced; not the
#   flush), `"writebacks"` (dirty lines written back, on eviction and at the flush), `"bytes_read"` (`misses *
#   line`) and `"bytes_written"` (`writebacks * line`).
# - `split_address(address, size, line, ways)` returns `[tag, set_index, offset]`, three ints, after checking the
#   geometry as above.
# - `traversal(rows, cols, order, itemsize)` returns the byte addresses (int64 array, `rows * cols` of them) read
#   when visiting every element of a `rows x cols` matrix stored **row-major** at address 0 (element `(i, j)` at
#   `(i * cols + j) * itemsize`): `order="row"` visits row 0 left to right, then row 1, ...; `order="column"`
#   visits column 0 top to bottom, then column 1, ....
# - The loop-nest and sort streams in the checks come from `aisys.cpu_cache` (you may look at them in the book's
#   page): `matmul(n, order, block)` is `C += A @ B` on `n x n` float64 matrices, each innermost step reading
#   `A[i, k]`, `B[k, j]`, `C[i, j]` and writing `C[i, j]`; `sort_trace` records every element read and written by
#   quicksort, merge sort and heapsort.
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers cannot.

# %%
import numpy as np

from aisys_grader import checker

check = checker("01-architecture/cache_simulator", globals())


def refusal(function, *args):
    """[kind, message] of what function(*args) raises ("ValueError" or "other"), or None if it returns."""
    try:
        if function == "split_address":
            split_address(*args)
        else:
            simulate(np.array([0], dtype=np.int64), np.array([False]), *args)
    except NotImplementedError:
        raise
    except ValueError as error:
        return ["ValueError", str(error)]
    except Exception as error:  # any other error is reported, and judged by the check
        return ["other", str(error)]
    return None


# %% [markdown]
# ## 1. Geometry and the address split
#
# A 32 KiB, 8-way cache of 64-byte lines has 32768 / (64 x 8) = 64 sets: an address's low 6 bits are its offset,
# the next 6 bits its set index, the rest its tag. Addresses `sets * line` bytes apart (here 4 KiB) share a set:
# a loop touching more than `ways` of them misses every time though the cache is almost empty (*conflict
# misses*).

# %% tags=["solution"]
def check_geometry(size, line, ways):
    """The number of sets, after checking the geometry; ValueError naming the argument at fault."""
    ### BEGIN SOLUTION
    for name, value in (("size", size), ("line", line), ("ways", ways)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if line & (line - 1):
        raise ValueError(f"line must be a power of two, got {line}")
    if size % (line * ways):
        raise ValueError(f"size must be a multiple of line * ways = {line * ways}, got {size}")
    sets = size // (line * ways)
    if sets & (sets - 1):
        raise ValueError(f"size must give a power-of-two number of sets, got {sets} sets")
    return sets
    ### END SOLUTION


def locate(address, line, sets):
    """(tag, set index) of a byte address."""
    ### BEGIN SOLUTION
    block = address // line
    return block // sets, block % sets
    ### END SOLUTION


def split_address(address, size, line, ways):
    """[tag, set_index, offset] of a byte address in this cache."""
    ### BEGIN SOLUTION
    sets = check_geometry(size, line, ways)
    tag, index = locate(address, line, sets)
    return [tag, index, address % line]
    ### END SOLUTION


# %% tags=["check"]
check("split_address")
### BEGIN HIDDEN TESTS
check("split_address", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. The simulator
#
# Keep, per set, its lines as `[tag, dirty]` pairs in recency order (a Python list, least recent first, is
# enough for a few ways). Count as you go; flush at the end.

# %% tags=["solution"]
def simulate(addresses, writes, size, line, ways):
    """Hits, misses, evictions, write-backs and bytes moved of an LRU, write-back, write-allocate cache."""
    ### BEGIN SOLUTION
    sets = check_geometry(size, line, ways)
    cache = [[] for _ in range(sets)]  # per set: [tag, dirty] pairs, least recently used first
    counts = {"hits": 0, "misses": 0, "evictions": 0, "writebacks": 0}
    for address, write in zip(np.asarray(addresses).tolist(), np.asarray(writes).tolist()):
        tag, index = locate(address, line, sets)
        lines = cache[index]
        found = next((entry for entry in lines if entry[0] == tag), None)
        if found is not None:
            counts["hits"] += 1
            lines.remove(found)  # the line becomes the most recently used
            lines.append(found)
        else:
            counts["misses"] += 1
            if len(lines) == ways:
                victim = lines.pop(0)
                counts["evictions"] += 1
                if victim[1]:
                    counts["writebacks"] += 1
            found = [tag, False]
            lines.append(found)
        if write:
            found[1] = True
    counts["writebacks"] += sum(dirty for lines in cache for _, dirty in lines)  # the final flush
    counts["bytes_read"] = counts["misses"] * line
    counts["bytes_written"] = counts["writebacks"] * line
    return counts
    ### END SOLUTION


# %% tags=["check"]
check("geometry_refused")
### BEGIN HIDDEN TESTS
check("geometry_refused", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("reads")
### BEGIN HIDDEN TESTS
check("reads", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("writes")
### BEGIN HIDDEN TESTS
check("writes", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Loop nests
#
# A row of a row-major matrix is contiguous: visiting it in order uses every byte of each line fetched (one miss
# per `line / itemsize` elements). Visiting a column jumps `cols * itemsize` bytes at each step: each access
# touches a new line, and once a column's lines exceed the cache, none is left when the next column needs it.
# Write the stream; the checks then run your simulator on it and on matrix multiplies in several loop orders,
# naive and blocked.

# %% tags=["solution"]
def traversal(rows, cols, order, itemsize):
    """Byte addresses of a row-major rows x cols matrix visited in row or column order, as int64."""
    ### BEGIN SOLUTION
    i, j = np.indices((rows, cols), dtype=np.int64)
    if order == "column":
        i, j = i.T, j.T
    return (i.ravel() * cols + j.ravel()) * itemsize
    ### END SOLUTION


# %% tags=["check"]
check("traversal")
### BEGIN HIDDEN TESTS
check("traversal", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("loop_nests")
### BEGIN HIDDEN TESTS
check("loop_nests", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Three sorts, one complexity
#
# Quicksort, merge sort and heapsort all make O(n log n) comparisons. The check runs your simulator on the
# element reads and writes of each, on an array a few times larger than the cache: which moves the fewest bytes,
# and why?

# %% tags=["check"]
check("sorts")
### BEGIN HIDDEN TESTS
check("sorts", hidden=True)
### END HIDDEN TESTS
