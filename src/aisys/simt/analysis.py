"""From one block's access log to what a profiler and a sanitizer would say about it.

The accesses of a warp's lanes are grouped into warp-level instructions the way
the hardware issues them: the k-th time each lane executes one source access is
one instruction. Per instruction:
- global memory: the 32-byte sectors it touches, against the fewest that could
  hold the bytes it uses (coalescing);
- shared memory: 32 banks of 4 bytes; the instruction takes as many wavefronts
  as the busiest bank has distinct words (lanes reading one word share it);
- branches: divergent when lanes of the warp went different ways.
Races: within one barrier interval, a write to a shared address and an access to
it by another thread, unless both threads are in one warp with a warp
synchronisation (`syncwarp`, a shuffle, a vote) between them.
"""

from collections import defaultdict

import numpy as np

from .memory import GLOBAL_ATOMIC, GLOBAL_LOAD, GLOBAL_STORE, SHARED_ATOMIC, SHARED_LOAD, SHARED_STORE

WARP, SECTOR, BANKS, BANK_BYTES = 32, 32, 32, 4
SITE, THREAD, KIND, ADDRESS, SIZE = range(5)


class Counters:
    """Totals of one launch, per source site."""

    def __init__(self):
        self.sites = defaultdict(lambda: defaultdict(int))  # site -> counter -> value

    def add(self, site: int, **counts):
        totals = self.sites[int(site)]
        for name, value in counts.items():
            totals[name] += int(value)


def _instructions(site, thread):
    """A number per record naming its warp-level instruction: (site, warp, k-th execution by the lane)."""
    n = len(site)
    order = np.lexsort((np.arange(n), thread, site))
    s, t = site[order], thread[order]
    first = np.ones(n, bool)
    first[1:] = (s[1:] != s[:-1]) | (t[1:] != t[:-1])
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    k = np.empty(n, np.int64)
    k[order] = np.arange(n) - start
    key = (site.astype(np.int64) << 40) | ((thread // WARP).astype(np.int64) << 30) | k
    _, ids = np.unique(key, return_inverse=True)
    return ids


def _sorted(*columns):
    """The order that sorts the rows of `columns`, and where in that order a new distinct row starts."""
    order = np.lexsort(columns[::-1])
    starts = np.zeros(len(order), bool)
    starts[:1] = True
    for c in columns:
        sc = c[order]
        starts[1:] |= sc[1:] != sc[:-1]
    return order, starts


def _distinct(*columns):
    """Mask of the first occurrence of each distinct row of `columns`."""
    order, starts = _sorted(*columns)
    mask = np.zeros(len(order), bool)
    mask[order[starts]] = True
    return mask


def _per_instruction_sites(ids, site):
    """The site of each instruction number."""
    out = np.zeros(ids.max() + 1, np.int64)
    out[ids] = site
    return out


def global_memory(records, counters: Counters):
    site, thread, kind, address, size = (records[:, i] for i in range(5))
    ids = _instructions(site, thread)
    sectors = np.bincount(ids[_distinct(ids, address // SECTOR)], minlength=ids.max() + 1)
    distinct = _distinct(ids, address)
    used = np.bincount(ids[distinct], weights=size[distinct], minlength=ids.max() + 1)
    ideal = np.ceil(used / SECTOR).astype(np.int64)
    sites = _per_instruction_sites(ids, site)
    for s in np.unique(sites):
        mine = sites == s
        counters.add(s, requests=mine.sum(), sectors=sectors[mine].sum(), ideal_sectors=ideal[mine].sum())


def shared_memory(records, counters: Counters):
    site, thread, address, size = records[:, SITE], records[:, THREAD], records[:, ADDRESS], records[:, SIZE]
    ids = _instructions(site, thread)
    word = address // BANK_BYTES
    words_per = np.maximum(size // BANK_BYTES, 1)
    if (words_per > 1).any():  # an 8- or 16-byte access touches several consecutive words
        repeat = np.repeat(np.arange(len(site)), words_per)
        word = word[repeat] + np.arange(len(repeat)) - np.repeat(np.cumsum(words_per) - words_per, words_per)
        ids, site = ids[repeat], site[repeat]
    distinct = _distinct(ids, word)
    n = ids.max() + 1
    per_bank = np.bincount(ids[distinct] * BANKS + word[distinct] % BANKS, minlength=n * BANKS)
    wavefronts = per_bank.reshape(n, BANKS).max(axis=1)
    ideal = np.ceil(np.bincount(ids[distinct], minlength=n) / BANKS).astype(np.int64)
    sites = _per_instruction_sites(ids, site)
    for s in np.unique(sites):
        mine = sites == s
        counters.add(s, requests=mine.sum(), wavefronts=wavefronts[mine].sum(),
                     bank_conflicts=(wavefronts[mine] - ideal[mine]).sum())


def atomics(records, counters: Counters):
    site, thread = records[:, SITE], records[:, THREAD]
    ids = _instructions(site, thread)
    sites = _per_instruction_sites(ids, site)
    for s in np.unique(sites):
        counters.add(s, requests=(sites == s).sum(), operations=(site == s).sum())


def branches(records, counters: Counters):
    site, thread, taken = records[:, 0], records[:, 1], records[:, 2]
    ids = _instructions(site, thread)
    n = ids.max() + 1
    some_taken = np.bincount(ids, weights=taken, minlength=n) > 0
    some_not = np.bincount(ids, weights=1 - taken, minlength=n) > 0
    sites = _per_instruction_sites(ids, site)
    for s in np.unique(sites):
        mine = sites == s
        counters.add(s, requests=mine.sum(), divergent=(some_taken[mine] & some_not[mine]).sum())


def _groups(*columns):
    """A group number per row: rows equal in every column share it."""
    order, starts = _sorted(*columns)
    ids = np.empty(len(order), np.int64)
    ids[order] = np.cumsum(starts) - 1
    return ids


def _count_distinct(group, values):
    """Per group, how many distinct values it holds."""
    first = _distinct(group, values)
    return np.bincount(group[first], minlength=group.max() + 1)


def races(records, position, block, examples: int = 3) -> tuple[int, list]:
    """How many shared addresses were raced on, and a few races: (write site, other site, writer, other, address).

    `records` are the block's shared loads, stores and atomics. Atomics do not race with each other, but do
    with another thread's plain load or store of the same word.
    """
    epoch = np.searchsorted(np.asarray(block.epochs, np.int64), position, side="right")
    thread, address = records[:, THREAD], records[:, ADDRESS]
    atomic = (records[:, KIND] == SHARED_ATOMIC).astype(np.int64)
    write = (records[:, KIND] == SHARED_STORE).astype(np.int64) | atomic
    warp = thread // WARP
    warp_sync = np.zeros(len(records), np.int64)
    for w in np.unique(warp):
        syncs = np.asarray(sorted(p for p, v in block.warp_syncs if v == w), np.int64)
        if len(syncs):
            mine = warp == w
            warp_sync[mine] = np.searchsorted(syncs, position[mine], side="right")
    # Accesses to one address in one barrier interval race when one writes and they come from two threads
    # of different warps, or of one warp with no warp synchronisation between them.
    group = _groups(epoch, address)
    many_threads = _count_distinct(group, thread) > 1
    across_warps = _count_distinct(group, warp) > 1
    sub = _groups(group, warp_sync)
    within_warp = np.zeros(group.max() + 1, bool)
    sub_racing = (_count_distinct(sub, thread) > 1) & (np.bincount(sub, weights=write) > 0)
    within_warp[group[sub_racing[sub]]] = True
    stored = np.bincount(group, weights=write - atomic) > 0
    atomics_and_plain = (np.bincount(group, weights=atomic) > 0) & (np.bincount(group, weights=1 - atomic) > 0)
    racing = np.flatnonzero(many_threads & ((stored & (across_warps | within_warp)) | atomics_and_plain))
    found = []
    for g in racing[:examples]:
        rows = np.flatnonzero(group == g)
        w = rows[write[rows] == 1][0]
        others = rows[(thread[rows] != thread[w]) & ((warp[rows] != warp[w]) | (warp_sync[rows] == warp_sync[w]))
                      & ((atomic[rows] == 0) | (atomic[w] == 0))]
        if atomic[w] and not len(others):  # the plain access is this thread's; another's atomic races with it
            w = rows[(atomic[rows] == 0) & (thread[rows] == thread[w])][0]
            others = rows[(atomic[rows] == 1) & (thread[rows] != thread[w])]
        o = others[0] if len(others) else rows[thread[rows] != thread[w]][0]
        found.append((int(records[w, SITE]), int(records[o, SITE]), int(thread[w]), int(thread[o]),
                      int(address[w])))
    return len(racing), found


def add_block(launch, block, log: list, threads: int) -> None:
    """Fold one finished block's log into its launch's counters and errors."""
    if block.branches:
        branches(np.asarray(block.branches, np.int64), launch.branches)
    if not log:
        return
    records = np.asarray(log, np.int64)
    kind = records[:, KIND]
    position = np.arange(len(records))
    glob = (kind == GLOBAL_LOAD) | (kind == GLOBAL_STORE)
    if glob.any():
        global_memory(records[glob], launch.global_memory)
    shared = (kind == SHARED_LOAD) | (kind == SHARED_STORE)
    if shared.any():
        shared_memory(records[shared], launch.shared_memory)
    shared |= kind == SHARED_ATOMIC
    if shared.any():
        count, examples = races(records[shared], position[shared], block)
        if count:
            launch.race(block, count, examples)
    for atomic_kind, counters in ((GLOBAL_ATOMIC, launch.global_atomics), (SHARED_ATOMIC, launch.shared_atomics)):
        if (kind == atomic_kind).any():
            atomics(records[kind == atomic_kind], counters)
