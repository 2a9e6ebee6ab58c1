"""A CPU cache simulator (set-associative, LRU or FIFO, write-back, write-allocate) and the address streams of loop
nests and sorts that drive it.

The cache: `size` bytes in lines of `line` bytes, `ways` lines per set, so `size // (line * ways)` sets. A byte
address `a` lies in memory block `a // line`; the block's set is `block % sets` (the low bits of the block number,
the *set index*), its tag `block // sets` (the bits above). Line size and the number of sets are powers of two, as
in hardware, where the index and the tag are bit fields of the address (Hennessy & Patterson, 6th ed., appendix B.1).

Policies, stated because simulators differ on each:
- replacement: LRU (a hit or a fill makes the line the most recent; the least recent of a full set is evicted), or
  FIFO (only a fill orders lines; hits change nothing);
- write-back: a write marks the line dirty; a dirty line is written to the next level when it is evicted, and, with
  `flush=True` (the default), at the end of the stream, so that every write reaches the next level;
- write-allocate: a write miss fills the line like a read miss (then dirties it);
- traffic to the next level is in whole lines: `bytes_read = misses * line` (every fill), `bytes_written =
  writebacks * line`.

Streams are `(addresses, writes)`: int64 byte addresses and booleans (True for a store), in program order.
"""

from collections import OrderedDict

import numpy as np

from aisys import _validate

POLICIES = ("lru", "fifo")
SORTS = ("quicksort", "merge sort", "heapsort")


def geometry(size, line, ways) -> tuple[int, int, int]:
    """(size, line, ways) checked: line a power of two, size a multiple of line * ways, the sets a power of two."""
    size = _validate.positive_int("size", size)
    line = _validate.positive_int("line", line)
    ways = _validate.positive_int("ways", ways)
    if line & (line - 1):
        raise ValueError(f"line must be a power of two (the offset is the address's low bits), got {line}")
    if size % (line * ways):
        raise ValueError(f"size must be a multiple of line * ways = {line * ways}, got {size}")
    sets = size // (line * ways)
    if sets & (sets - 1):
        raise ValueError(f"size must give a power-of-two number of sets (size // (line * ways)), got {sets} sets")
    return size, line, ways


def split_address(address, *, size, line, ways) -> list[int]:
    """[tag, set index, offset] of a byte address: the block address // line split into its low log2(sets) bits
    (the set) and the bits above (the tag)."""
    address = _validate.nonnegative_int("address", address)
    size, line, ways = geometry(size, line, ways)
    sets = size // (line * ways)
    block = address // line
    return [block // sets, block % sets, address % line]


def _stream(addresses, writes) -> tuple[np.ndarray, np.ndarray]:
    addresses = np.asarray(addresses)
    if addresses.ndim != 1 or (addresses.size and addresses.dtype.kind not in "iu"):
        raise ValueError(f"addresses must be a 1-d array of integers, got {addresses.dtype} of shape "
                         f"{addresses.shape}")
    if addresses.size and addresses.min() < 0:
        raise ValueError("addresses must be non-negative byte addresses")
    writes = np.zeros(addresses.shape, bool) if writes is None else np.asarray(writes, dtype=bool)
    if writes.shape != addresses.shape:
        raise ValueError(f"writes must have one flag per address ({addresses.shape}), got {writes.shape}")
    return addresses.astype(np.int64), writes


class Cache:
    """One level: sets of OrderedDicts tag -> dirty, the least recent first, and its counters."""

    def __init__(self, size, line, ways, policy="lru"):
        self.size, self.line, self.ways = geometry(size, line, ways)
        self.policy = _validate.one_of("policy", policy, POLICIES)
        self.sets = [OrderedDict() for _ in range(self.size // (self.line * self.ways))]
        self.counts = dict.fromkeys(("hits", "misses", "evictions", "writebacks"), 0)

    def access(self, address: int, write: bool) -> tuple[bool, int | None]:
        """One load or store: (hit, the byte address of a dirty line evicted to make room, or None)."""
        block = address // self.line
        lines = self.sets[block % len(self.sets)]
        tag = block // len(self.sets)
        victim = None
        if tag in lines:
            self.counts["hits"] += 1
            if self.policy == "lru":
                lines.move_to_end(tag)
            hit = True
        else:
            self.counts["misses"] += 1
            if len(lines) == self.ways:
                old, dirty = lines.popitem(last=False)
                self.counts["evictions"] += 1
                if dirty:
                    self.counts["writebacks"] += 1
                    victim = (old * len(self.sets) + block % len(self.sets)) * self.line
            lines[tag] = False
            hit = False
        if write:
            lines[tag] = True  # assignment keeps the key's place in the order
        return hit, victim

    def flush(self) -> list[int]:
        """Write back every dirty line (counted in writebacks); the byte addresses written, in set order."""
        written = []
        for index, lines in enumerate(self.sets):
            for tag, dirty in lines.items():
                if dirty:
                    written.append((tag * len(self.sets) + index) * self.line)
                    lines[tag] = False
        self.counts["writebacks"] += len(written)
        return written

    def result(self) -> dict:
        return {**self.counts, "bytes_read": self.counts["misses"] * self.line,
                "bytes_written": self.counts["writebacks"] * self.line}


def simulate(addresses, writes=None, *, size, line, ways, policy="lru", flush=True) -> dict:
    """Run a stream through one cache: a dict of ints, hits, misses, evictions (valid lines replaced), writebacks
    (dirty lines written to the next level, on eviction and, with flush, at the end), bytes_read (line fills) and
    bytes_written (write-backs), the last two in bytes."""
    addresses, writes = _stream(addresses, writes)
    cache = Cache(size, line, ways, policy)
    for address, write in zip(addresses.tolist(), writes.tolist()):
        cache.access(address, write)
    if flush:
        cache.flush()
    return cache.result()


def simulate_hierarchy(addresses, writes=None, *, levels, policy="lru") -> list[dict]:
    """Run a stream through L1, then L2, ...: `levels` is a list of dicts (size, line, ways). A miss at one level
    reads its line from the next (a load there), and a dirty line it evicts is stored there (a store of the whole
    line); each level is neither inclusive nor exclusive of the next. At the end each level is flushed into the
    next, the first level first. One result per level, as simulate's."""
    addresses, writes = _stream(addresses, writes)
    if not levels:
        raise ValueError("levels must list at least one cache")
    caches = [Cache(level["size"], level["line"], level["ways"], policy) for level in levels]

    def send(k: int, address: int, write: bool) -> None:
        hit, victim = caches[k].access(address, write)
        if k + 1 < len(caches):
            if victim is not None:
                send(k + 1, victim, True)
            if not hit:
                send(k + 1, address - address % caches[k].line, False)

    for address, write in zip(addresses.tolist(), writes.tolist()):
        send(0, address, write)
    for k, cache in enumerate(caches):
        for address in cache.flush():
            if k + 1 < len(caches):
                send(k + 1, address, True)
    return [cache.result() for cache in caches]


# ---------------------------------------------------------------------------------------------------------------
# Address streams. Matrices are row-major (C order): element (i, j) of a rows x cols matrix of `itemsize`-byte
# elements lies at base + (i * cols + j) * itemsize.

def traversal(rows, cols, order="row", itemsize=8, base=0) -> np.ndarray:
    """The addresses read when summing a row-major rows x cols matrix in row order (j innermost) or column order
    (i innermost): int64, rows * cols of them. Reads only."""
    rows, cols = _validate.positive_int("rows", rows), _validate.positive_int("cols", cols)
    itemsize = _validate.positive_int("itemsize", itemsize)
    order = _validate.one_of("order", order, ("row", "column"))
    i, j = np.indices((rows, cols), dtype=np.int64)
    if order == "column":
        i, j = i.T, j.T
    return base + (i.ravel() * cols + j.ravel()) * itemsize


def matmul(n, order="ijk", block=None, itemsize=8) -> tuple[np.ndarray, np.ndarray]:
    """The stream of C += A @ B for n x n row-major matrices A, B, C at byte addresses 0, n*n*itemsize and
    2*n*n*itemsize. `order` names the loops from outermost to innermost (a permutation of "ijk"); each innermost
    step reads A[i, k], reads B[k, j], reads C[i, j] and writes C[i, j] (4 n^3 accesses, no register kept across
    steps). With `block` = b (dividing n), the loops run over b x b x b tiles in `order`, and within a tile in the
    same order (Lam, Rothberg and Wolf 1991)."""
    n = _validate.positive_int("n", n)
    itemsize = _validate.positive_int("itemsize", itemsize)
    if sorted(order) != ["i", "j", "k"]:
        raise ValueError(f"order must be a permutation of 'ijk', got {order!r}")
    b = n if block is None else _validate.positive_int("block", block)
    if n % b:
        raise ValueError(f"block must divide n = {n}, got {b}")
    t = n // b
    # indices over (tile_0, tile_1, tile_2, elem_0, elem_1, elem_2), loop `order[p]` at positions p and 3 + p
    grid = np.indices((t, t, t, b, b, b), dtype=np.int64).reshape(6, -1)
    index = {name: grid[p] * b + grid[3 + p] for p, name in enumerate(order)}
    i, j, k = index["i"], index["j"], index["k"]
    a, bb, c = (i * n + k) * itemsize, (n * n + k * n + j) * itemsize, (2 * n * n + i * n + j) * itemsize
    addresses = np.stack([a, bb, c, c], axis=1).ravel()
    writes = np.tile(np.array([False, False, False, True]), n**3)
    return addresses, writes


class _Traced:
    """An array whose reads and writes are recorded as (index, is_write)."""

    def __init__(self, values, base: int):
        self.values, self.base, self.log = list(values), base, []

    def __getitem__(self, index):
        self.log.append((self.base + index, False))
        return self.values[index]

    def __setitem__(self, index, value):
        self.log.append((self.base + index, True))
        self.values[index] = value


def _quicksort(a: _Traced, lo: int, hi: int) -> None:
    """Hoare's partition around the middle element's value, recursing into both sides."""
    while lo < hi:
        pivot = a[(lo + hi) // 2]
        i, j = lo - 1, hi + 1
        while True:
            i += 1
            while a[i] < pivot:
                i += 1
            j -= 1
            while a[j] > pivot:
                j -= 1
            if i >= j:
                break
            x, y = a[i], a[j]
            a[i], a[j] = y, x
        if j - lo < hi - j - 1:  # recurse into the smaller side, loop on the larger
            _quicksort(a, lo, j)
            lo = j + 1
        else:
            _quicksort(a, j + 1, hi)
            hi = j


def _merge_sort(a: _Traced, n: int) -> None:
    """Bottom-up: merge runs of width 1, 2, 4, ... from the array into the buffer (indices n..2n-1), then copy the
    buffer back."""
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            for out in range(lo, hi):
                if j >= hi or (i < mid and a[i] <= a[j]):
                    a[n + out] = a[i]
                    i += 1
                else:
                    a[n + out] = a[j]
                    j += 1
        for out in range(n):
            a[out] = a[n + out]
        width *= 2


def _heapsort(a: _Traced, n: int) -> None:
    """Build a max-heap (sift-down from the last parent), then move the root to the end n - 1 times."""
    def sift(root: int, end: int) -> None:
        value = a[root]
        while 2 * root + 1 < end:
            child = 2 * root + 1
            if child + 1 < end and a[child + 1] > a[child]:
                child += 1
            bigger = a[child]
            if bigger <= value:
                break
            a[root] = bigger
            root = child
        a[root] = value

    for start in range(n // 2 - 1, -1, -1):
        sift(start, n)
    for end in range(n - 1, 0, -1):
        top, last = a[0], a[end]
        a[0], a[end] = last, top
        sift(0, end)


def sort_trace(values, algorithm, itemsize=8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort `values` with `algorithm` ("quicksort", "merge sort" or "heapsort", simple textbook versions) and record
    every element read and written: (addresses int64, writes bool, the sorted values). The array lies at address 0;
    merge sort's n-element buffer right after it."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"values must be 1-d, got shape {values.shape}")
    algorithm = _validate.one_of("algorithm", algorithm, SORTS)
    itemsize = _validate.positive_int("itemsize", itemsize)
    n = len(values)
    traced = _Traced(list(values.tolist()) + ([None] * n if algorithm == "merge sort" else []), 0)
    if algorithm == "quicksort":
        _quicksort(traced, 0, n - 1)
    elif algorithm == "merge sort":
        _merge_sort(traced, n)
    else:
        _heapsort(traced, n)
    log = np.array(traced.log, dtype=np.int64).reshape(-1, 2)
    return log[:, 0] * itemsize, log[:, 1].astype(bool), np.array(traced.values[:n], dtype=values.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Coherence: the MESI protocol for one line shared by several cores' private caches on a snooping bus (Papamarcos
# and Patel, ISCA 1984; Hennessy & Patterson, 6th ed., section 5.2).

def mesi(accesses, cores=2) -> list[dict]:
    """Replay `accesses`, pairs (core, "read" | "write" | "evict"), on one line; per access a dict: the core, the
    operation, the bus transaction it causes ("BusRd", "BusRdX" for a read for ownership, "BusUpgr" for a write to
    a Shared copy, "writeback", or "" for none), who supplies the data ("memory", "core k" for a Modified or
    Exclusive copy forwarding it, or "" when nothing is read), and the states after it, one letter per core."""
    cores = _validate.positive_int("cores", cores)
    states = ["I"] * cores
    rows = []
    for core, op in accesses:
        if not (isinstance(core, int) and 0 <= core < cores):
            raise ValueError(f"accesses name core {core!r}; cores are 0..{cores - 1}")
        op = _validate.one_of("operation", op, ("read", "write", "evict"))
        others = [k for k in range(cores) if k != core and states[k] != "I"]
        owner = next((k for k in others if states[k] in "ME"), None)
        bus, source = "", ""
        if op == "read":
            if states[core] == "I":
                bus, source = "BusRd", "memory" if owner is None else f"core {owner}"
                for k in others:
                    states[k] = "S"  # a Modified owner writes back (or forwards) and keeps a Shared copy
                states[core] = "S" if others else "E"
        elif op == "write":
            if states[core] == "I":
                bus, source = "BusRdX", "memory" if owner is None else f"core {owner}"
            elif states[core] == "S":
                bus = "BusUpgr"
            for k in others:
                states[k] = "I"
            states[core] = "M"
        else:
            bus = "writeback" if states[core] == "M" else ""
            states[core] = "I"
        rows.append({"core": core, "operation": op, "bus": bus, "source": source, "states": "".join(states)})
    return rows


def host_caches(root="/sys/devices/system/cpu/cpu0/cache") -> list[dict]:
    """The caches of the machine running this, read from Linux's sysfs: level, type, size in bytes, ways, line
    size and the CPUs sharing it, one dict per cache; [] where sysfs does not describe them (not Linux)."""
    from pathlib import Path

    found = []
    for index in sorted(Path(root).glob("index*")):
        def read(name):
            path = index / name
            return path.read_text().strip() if path.exists() else ""
        size = read("size")
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        try:
            found.append({"level": int(read("level")), "type": read("type"),
                          "size": int(size.rstrip("KMG")) * scale, "ways": int(read("ways_of_associativity") or 0),
                          "line": int(read("coherency_line_size") or 0), "shared_cpus": read("shared_cpu_list")})
        except ValueError:
            continue
    return found
