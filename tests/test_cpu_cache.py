"""aisys.cpu_cache: hand-computed streams (conflict misses, LRU against FIFO, dirty write-backs, the flush), the
two-level hierarchy, the geometry checks, and the address streams of loop nests and sorts."""

import numpy as np
import pytest

from aisys import cpu_cache as cc

A, B, C = 0, 64, 128  # three lines that share the only set of a 128-byte 2-way cache with 64-byte lines
ONE_SET = dict(size=128, line=64, ways=2)


def test_direct_mapped_conflict_misses():
    # 256 bytes, 64-byte lines, direct-mapped: 4 sets; 0 and 256 are blocks 0 and 4, both set 0
    direct = dict(size=256, line=64, ways=1)
    assert cc.simulate([0, 256, 0, 256], **direct) == {
        "hits": 0, "misses": 4, "evictions": 3, "writebacks": 0, "bytes_read": 256, "bytes_written": 0}
    assert cc.simulate([0, 64, 0, 64], **direct)["hits"] == 2  # different sets: no conflict
    # the same 256 bytes 2-way (2 sets): blocks 0 and 4 share set 0 and both fit
    assert cc.simulate([0, 256, 0, 256], size=256, line=64, ways=2)["hits"] == 2
    assert cc.simulate([0, 8, 63, 64], **direct)["misses"] == 2  # bytes of one line hit


def test_lru_against_fifo():
    stream = [A, B, A, C, A]
    assert cc.simulate(stream, **ONE_SET)["hits"] == 2  # C evicts B, the least recently used
    assert cc.simulate(stream, **ONE_SET, policy="fifo")["hits"] == 1  # C evicts A, the first in
    assert cc.simulate([A, B, C] * 4, **ONE_SET)["hits"] == 0  # three lines cycling through two ways thrash


def test_write_back_only_dirty_lines_and_the_flush():
    got = cc.simulate([A, B, C, A], [True, False, False, False], **ONE_SET)
    assert got == {"hits": 0, "misses": 4, "evictions": 2, "writebacks": 1, "bytes_read": 256, "bytes_written": 64}
    assert cc.simulate([A], [True], **ONE_SET)["writebacks"] == 1
    assert cc.simulate([A], [True], **ONE_SET, flush=False)["writebacks"] == 0
    # a write miss allocates: the read after it hits
    assert cc.simulate([A, A], [True, False], **ONE_SET)["hits"] == 1
    # a line written many times is written back once
    assert cc.simulate([A] * 5 + [B, C], [True] * 5 + [False] * 2, **ONE_SET)["writebacks"] == 1


def test_hierarchy():
    levels = [dict(size=128, line=64, ways=1), dict(size=1024, line=64, ways=2)]
    l1, l2 = cc.simulate_hierarchy([0, 128, 0, 128], levels=levels)
    assert (l1["misses"], l2["misses"], l2["hits"]) == (4, 2, 2)  # L1 conflicts, L2 holds both
    l1, l2 = cc.simulate_hierarchy([0, 128], [True, False], levels=levels)
    assert l1["writebacks"] == 1 and l2["writebacks"] == 1  # L1's victim lands in L2, flushed at the end
    single = cc.simulate([3, 70, 3], **levels[0])
    assert cc.simulate_hierarchy([3, 70, 3], levels=levels[:1])[0] == single


@pytest.mark.parametrize("kwargs, name", [
    (dict(size=100, line=64, ways=1), "size"), (dict(size=192, line=48, ways=1), "line"),
    (dict(size=128, line=64, ways=0), "ways"), (dict(size=384, line=64, ways=2), "size"),
    (dict(size=128.0, line=64, ways=2), "size")])
def test_geometry_refused(kwargs, name):
    with pytest.raises(ValueError, match=name):
        cc.simulate([0], **kwargs)


def test_stream_refused():
    with pytest.raises(ValueError, match="writes"):
        cc.simulate([0, 1], [True], **ONE_SET)
    with pytest.raises(ValueError, match="addresses"):
        cc.simulate([-8], **ONE_SET)


def test_traversal():
    assert cc.traversal(2, 3, "row", itemsize=4).tolist() == [0, 4, 8, 12, 16, 20]
    assert cc.traversal(2, 3, "column", itemsize=4).tolist() == [0, 12, 4, 16, 8, 20]
    cache = dict(size=4096, line=64, ways=4)  # 64 doubles a row = 8 lines; 64 rows = 32 KiB, 8 times the cache
    row = cc.simulate(cc.traversal(64, 64, "row"), **cache)
    column = cc.simulate(cc.traversal(64, 64, "column"), **cache)
    assert row["misses"] == 64 * 64 // 8 and column["misses"] == 64 * 64  # one miss a line against one an element


def test_matmul_stream():
    n = 8
    addresses, writes = cc.matmul(n, "ijk", itemsize=8)
    assert addresses.shape == writes.shape == (4 * n**3,) and writes.sum() == n**3
    assert addresses[:4].tolist() == [0, n * n * 8, 2 * n * n * 8, 2 * n * n * 8]  # A[0,0], B[0,0], C[0,0] twice
    assert addresses[4:6].tolist() == [8, (n * n + n) * 8]  # k moves: A[0,1], B[1,0]
    naive = np.sort(addresses)
    for order in ("ikj", "jki", "kij"):
        for block in (None, 2, 4):
            got, _ = cc.matmul(n, order, block)
            assert (np.sort(got) == naive).all()  # every order and tiling makes the same accesses
    cache = dict(size=2048, line=64, ways=4)
    misses = {o: cc.simulate(*cc.matmul(32, o), **cache)["misses"] for o in ("ijk", "ikj", "jki")}
    assert misses["ikj"] < misses["ijk"] < misses["jki"]  # unit stride inner loop best, column walks worst
    # three 8 x 8 tiles (24 lines) fit a 64-line cache: each element of a tile is fetched once per tile visit
    big = dict(size=4096, line=64, ways=8)
    assert cc.simulate(*cc.matmul(32, "ijk", 8), **big)["misses"] < cc.simulate(*cc.matmul(32, "ijk"), **big)[
        "misses"] / 10
    # the same tiles in a 4-set cache: 8 rows 256 bytes apart fall into one set and thrash (conflict misses)
    assert cc.simulate(*cc.matmul(32, "ijk", 8), size=2048, line=64, ways=8)["misses"] > misses["ijk"] / 2
    with pytest.raises(ValueError, match="block"):
        cc.matmul(10, "ijk", 4)
    with pytest.raises(ValueError, match="order"):
        cc.matmul(4, "iik")


@pytest.mark.parametrize("algorithm", cc.SORTS)
def test_sort_traces(algorithm):
    values = np.random.default_rng(1).permutation(300)
    addresses, writes, out = cc.sort_trace(values, algorithm, itemsize=4)
    assert (out == np.sort(values)).all()
    assert addresses.dtype == np.int64 and writes.dtype == bool and addresses.shape == writes.shape
    limit = 2 * len(values) if algorithm == "merge sort" else len(values)
    assert addresses.min() >= 0 and addresses.max() < limit * 4 and (addresses % 4 == 0).all()
    assert cc.sort_trace([], algorithm)[0].size == 0


def test_quicksort_is_the_cache_friendliest():
    values = np.random.default_rng(2).permutation(1024)
    cache = dict(size=2048, line=64, ways=4)  # 256 doubles: the array is 4 times the cache
    traffic = {s: (lambda r: r["bytes_read"] + r["bytes_written"])(cc.simulate(*cc.sort_trace(values, s)[:2],
                                                                                **cache)) for s in cc.SORTS}
    assert traffic["quicksort"] < traffic["merge sort"] and traffic["quicksort"] < traffic["heapsort"]


def test_split_address():
    # 32 KiB, 8-way, 64-byte lines: 64 sets; offset bits 0-5, set bits 6-11, the tag from bit 12
    assert cc.split_address(4096 + 64 * 5 + 7, size=32768, line=64, ways=8) == [1, 5, 7]
    assert cc.split_address(1000, size=256, line=16, ways=16) == [62, 0, 8]  # one set: the tag is the block
    with pytest.raises(ValueError, match="address"):
        cc.split_address(-1, size=256, line=16, ways=1)


def test_mesi():
    rows = cc.mesi([(0, "read"), (1, "read"), (1, "write"), (0, "read"), (0, "write"), (0, "write"), (1, "evict")])
    assert [r["states"] for r in rows] == ["EI", "SS", "IM", "SS", "MI", "MI", "MI"]
    assert [r["bus"] for r in rows] == ["BusRd", "BusRd", "BusUpgr", "BusRd", "BusUpgr", "", ""]
    assert rows[3]["source"] == "core 1"  # the Modified copy supplies the line
    assert cc.mesi([(0, "write"), (0, "evict")])[1]["bus"] == "writeback"
    with pytest.raises(ValueError, match="core"):
        cc.mesi([(2, "read")])


def test_host_caches(tmp_path):
    index = tmp_path / "index0"
    index.mkdir()
    for name, text in {"level": "1", "type": "Data", "size": "48K", "ways_of_associativity": "12",
                       "coherency_line_size": "64", "shared_cpu_list": "0"}.items():
        (index / name).write_text(text + "\n")
    assert cc.host_caches(tmp_path) == [{"level": 1, "type": "Data", "size": 48 * 1024, "ways": 12, "line": 64,
                                         "shared_cpus": "0"}]
    assert cc.host_caches(tmp_path / "absent") == []
