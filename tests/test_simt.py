"""The SIMT simulator: CUDA semantics, the profiler's figures, the sanitizer's errors, and clear errors for bad
input."""

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisys import simt
from aisys.simt import KernelError, SimtWarning, SourceError, cuda

TILE = 32
TILE_PADDED = TILE + 1  # numba compiles shapes made of numbers and global names only
BLOCK = 64


@pytest.fixture(autouse=True)
def simulator():
    """These tests are about the simulator: launches go to it even on a GPU machine."""
    with simt.profile():
        yield


def run(kernel, grid, block, *args):
    """Launch in the simulator; the launch's report as plain data."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SimtWarning)
        with simt.profile() as launches:
            kernel[grid, block](*args)
    assert len(launches) == 1
    return launches[0].to_plain()


# kernels ---------------------------------------------------------------------------------------------------

@cuda.jit
def copy(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i]


@cuda.jit
def copy_strided(x, out, stride):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i * stride]


@cuda.jit
def broadcast(x, out):
    i = cuda.grid(1)
    out[i] = x[0]


@cuda.jit
def grid_stride_add(x, y, out):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = x[i] + y[i]


@cuda.jit
def transpose_tile(a, out):
    tile = cuda.shared.array((TILE, TILE), np.float32)
    x, y = cuda.threadIdx.x, cuda.threadIdx.y
    tile[y, x] = a[y, x]
    cuda.syncthreads()
    out[y, x] = tile[x, y]


@cuda.jit
def transpose_padded(a, out):
    tile = cuda.shared.array((TILE, TILE_PADDED), np.float32)
    x, y = cuda.threadIdx.x, cuda.threadIdx.y
    tile[y, x] = a[y, x]
    cuda.syncthreads()
    out[y, x] = tile[x, y]


@cuda.jit
def shared_float64(x, out):
    s = cuda.shared.array(BLOCK, np.float64)
    t = cuda.threadIdx.x
    s[t] = x[t]
    cuda.syncthreads()
    out[t] = s[t]


@cuda.jit
def odd_lanes(out):
    i = cuda.grid(1)
    if i % 2 == 1:
        out[i] = 1
    else:
        out[i] = 2


@cuda.jit
def uniform_per_warp(out):
    i = cuda.grid(1)
    if i // 32 % 2 == 1:
        out[i] = 1


@cuda.jit
def tree_sum(x, out, barrier):
    s = cuda.shared.array(BLOCK, np.int64)
    t = cuda.threadIdx.x
    s[t] = x[cuda.grid(1)]
    cuda.syncthreads()
    step = BLOCK // 2
    while step > 0:
        if t < step:
            s[t] += s[t + step]
        if barrier:
            cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = s[0]


@cuda.jit
def warp_exchange(out, sync):
    s = cuda.shared.array(32, np.int32)
    lane = cuda.threadIdx.x
    s[lane] = lane
    if sync:
        cuda.syncwarp()
    out[lane] = s[31 - lane]


@cuda.jit
def early_return(x, out):
    s = cuda.shared.array(BLOCK, np.float32)
    i = cuda.grid(1)
    if i >= x.size:
        return
    s[cuda.threadIdx.x] = x[i]
    cuda.syncthreads()
    out[i] = s[cuda.threadIdx.x]


@cuda.jit
def half_warp_shuffle(out):
    lane = cuda.threadIdx.x
    if lane < 16:
        out[lane] = cuda.shfl_sync(0xFFFFFFFF, lane, 0)


@cuda.jit
def shuffle_with_half_mask(out):
    lane = cuda.threadIdx.x
    out[lane] = cuda.shfl_down_sync(0xFFFF, lane, 1)  # every lane calls it; the mask names lanes 0..15 only


@cuda.jit
def collectives(out):
    lane = cuda.threadIdx.x
    out[0, lane] = cuda.shfl_down_sync(0xFFFFFFFF, lane * 10, 3)
    out[1, lane] = cuda.shfl_up_sync(0xFFFFFFFF, lane * 10, 3)
    out[2, lane] = cuda.shfl_xor_sync(0xFFFFFFFF, lane * 10, 5)
    out[3, lane] = cuda.shfl_sync(0xFFFFFFFF, lane * 10, 7)
    out[4, lane] = cuda.ballot_sync(0xFFFFFFFF, lane % 3 == 0)
    out[5, lane] = cuda.all_sync(0xFFFFFFFF, lane < 40)
    out[6, lane] = cuda.any_sync(0xFFFFFFFF, lane == 31)
    out[7, lane] = cuda.syncthreads_count(1 if lane < 5 else 0)
    out[8, lane] = cuda.laneid


@cuda.jit(device=True)
def block_total(s, t):
    cuda.syncthreads()  # a barrier inside a device function
    step = BLOCK // 2
    while step > 0:
        if t < step:
            s[t] += s[t + step]
        cuda.syncthreads()
        step //= 2
    return s[0]


@cuda.jit
def histogram(values, bins):
    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):
        cuda.atomic.add(bins, values[i], 1)


@cuda.jit
def sum_with_device_function(x, out):
    s = cuda.shared.array(BLOCK, np.float64)
    t = cuda.threadIdx.x
    s[t] = x[t]
    total = block_total(s, t)
    if t == 0:
        out[0] = total


@cuda.jit
def index_2d(out):
    row, col = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = row * 1000 + col


@cuda.jit
def swap_pairs(a):
    i = cuda.grid(1) * 2
    if i + 1 < a.size:
        a[i], a[i + 1] = a[i + 1], a[i]


@cuda.jit
def too_much_shared(x):
    s = cuda.shared.array(13000, np.float32)
    s[0] = 1


@cuda.jit
def padded_by_arithmetic(x):
    tile = cuda.shared.array((TILE, TILE + 1), np.float32)
    x[0] = tile[0, 0]


@cuda.jit
def negative_index(x):
    x[cuda.grid(1) - 1] = 0


@cuda.jit
def float_index(x):
    x[1.0] = 0


@cuda.jit
def wrong_rank(x):
    x[0] = 0


# figures ----------------------------------------------------------------------------------------------------

def test_coalesced_copy_touches_the_fewest_sectors():
    x = np.arange(1024, dtype=np.float32)
    out = np.zeros_like(x)
    report = run(copy, 4, 256, x, out)
    assert np.array_equal(out, x)
    assert report["global"]["requests"] == 64  # 32 warps, one load and one store each
    assert report["global"]["sectors"] == report["global"]["ideal_sectors"] == 256  # 4 KiB each way, 32 B sectors
    assert report["global"]["efficiency"] == 1.0


@pytest.mark.parametrize("stride, efficiency", [(2, 0.5), (4, 0.25), (8, 0.125), (32, 0.125)])
def test_strided_loads_waste_sectors(stride, efficiency):
    x = np.arange(32 * stride, dtype=np.float32)
    out = np.zeros(32, np.float32)
    report = run(copy_strided, 1, 32, x, out, stride)
    assert np.array_equal(out, x[::stride])
    load = next(r for r in report["lines"] if r["kind"] == "load" and r["space"] == "global")
    assert load["ideal_sectors"] == 4
    assert load["ideal_sectors"] / load["sectors"] == efficiency


def test_broadcast_is_one_sector():
    report = run(broadcast, 1, 32, np.ones(4, np.float32), np.zeros(32, np.float32))
    load = next(r for r in report["lines"] if r["kind"] == "load")
    assert (load["sectors"], load["ideal_sectors"]) == (1, 1)


def test_column_read_of_a_tile_is_a_32_way_conflict_and_padding_removes_it():
    a = np.arange(TILE * TILE, dtype=np.float32).reshape(TILE, TILE)
    for kernel, conflicts in ((transpose_tile, 31 * TILE), (transpose_padded, 0)):
        out = np.zeros_like(a)
        report = run(kernel, 1, (TILE, TILE), a, out)
        assert np.array_equal(out, a.T)
        read = next(r for r in report["lines"] if r["space"] == "shared" and r["kind"] == "load")
        assert read["requests"] == TILE and read["bank_conflicts"] == conflicts
        assert report["shared"]["bank_conflicts"] == conflicts
        assert report["errors"] == []


def test_eight_byte_elements_take_two_wavefronts_without_conflict():
    x = np.arange(BLOCK, dtype=np.float64)
    report = run(shared_float64, 1, BLOCK, x, np.zeros_like(x))
    assert report["shared"]["bank_conflicts"] == 0
    assert report["shared"]["wavefronts"] == 2 * report["shared"]["requests"]


def test_divergence_is_counted_per_warp():
    out = np.zeros(128, np.int32)
    assert run(odd_lanes, 1, 128, out)["branches"] == {"evaluations": 4, "divergent": 4}
    assert run(uniform_per_warp, 1, 128, out)["branches"] == {"evaluations": 4, "divergent": 0}


def test_grid_stride_loop_is_correct_and_coalesced():
    x = np.arange(1000, dtype=np.float32)
    out = np.zeros_like(x)
    report = run(grid_stride_add, 2, 64, x, x, out)
    assert np.array_equal(out, 2 * x)
    assert report["threads"] == 128
    assert report["global"]["efficiency"] > 0.95  # only the ragged last warp wastes a little


def test_atomics_count_and_are_not_races():
    values = np.random.default_rng(0).integers(0, 8, 500).astype(np.int32)
    bins = np.zeros(8, np.int64)
    report = run(histogram, 2, 64, values, bins)
    assert np.array_equal(bins, np.bincount(values, minlength=8))
    assert report["atomics"]["operations"] == 500
    assert report["errors"] == []


# the sanitizer ----------------------------------------------------------------------------------------------

def test_missing_barrier_is_a_race_with_the_lines_in_the_message():
    x = np.arange(4 * BLOCK, dtype=np.int64)
    out = np.zeros(4, np.int64)
    good = run(tree_sum, 4, BLOCK, x, out, True)
    assert good["errors"] == [] and np.array_equal(out, x.reshape(4, BLOCK).sum(1))
    bad = run(tree_sum, 4, BLOCK, x, out, False)
    (error,) = bad["errors"]
    assert error["kind"] == "race" and error["count"] > 0
    assert "s[t] += s[t + step]" in error["message"] and "syncthreads" in error["message"]


def test_syncwarp_orders_lanes_of_one_warp():
    out = np.zeros(32, np.int32)
    assert run(warp_exchange, 1, 32, out, True)["errors"] == []
    assert np.array_equal(out, np.arange(31, -1, -1))
    assert [e["kind"] for e in run(warp_exchange, 1, 32, out, False)["errors"]] == ["race"]


def test_barrier_not_reached_by_every_thread_is_reported_not_hung():
    x = np.arange(100, dtype=np.float32)
    out = np.zeros_like(x)
    with pytest.warns(SimtWarning, match="reached by 36 of the block's 64 threads"):
        with simt.profile() as launches:
            early_return[2, BLOCK](x, out)
    (error,) = launches[0]["errors"]
    assert error["kind"] == "barrier"
    assert np.array_equal(out, x)


def test_collective_with_missing_lanes_is_reported_not_hung():
    report = run(half_warp_shuffle, 1, 32, np.zeros(32, np.int32))
    (error,) = report["errors"]
    assert error["kind"] == "warp" and "16..31" in error["message"]


def test_collective_called_by_a_lane_outside_its_mask_is_reported():
    report = run(shuffle_with_half_mask, 1, 32, np.zeros(32, np.int32))
    (error,) = report["errors"]
    assert error["kind"] == "warp" and error["count"] == 1
    assert "lane(s) 16..31 of warp 0" in error["message"] and "0x0000ffff" in error["message"]


def test_warp_collectives_follow_cuda_semantics():
    out = np.zeros((9, 32), np.int64)
    report = run(collectives, 1, 32, out)
    lane = np.arange(32)
    assert np.array_equal(out[0], np.where(lane + 3 < 32, (lane + 3) * 10, lane * 10))
    assert np.array_equal(out[1], np.where(lane >= 3, (lane - 3) * 10, lane * 10))
    assert np.array_equal(out[2], (lane ^ 5) * 10)
    assert np.array_equal(out[3], np.full(32, 70))
    assert np.all(out[4] == sum(1 << i for i in range(0, 32, 3)))
    assert np.all(out[5] == 1) and np.all(out[6] == 1)
    assert np.all(out[7] == 5)
    assert np.array_equal(out[8], lane)
    assert report["errors"] == []


def test_barrier_inside_a_device_function():
    x = np.arange(BLOCK, dtype=np.float64)
    out = np.zeros(1)
    assert run(sum_with_device_function, 1, BLOCK, x, out)["errors"] == []
    assert out[0] == x.sum()


def test_two_dimensional_grid_and_tuple_assignment():
    out = np.zeros((37, 45), np.int64)
    run(index_2d, (3, 4), (16, 16), out)
    rows, cols = np.indices(out.shape)
    assert np.array_equal(out, rows * 1000 + cols)
    a = np.arange(9, dtype=np.int32)
    run(swap_pairs, 1, 8, a)
    assert list(a) == [1, 0, 3, 2, 5, 4, 7, 6, 8]


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 700), blocks=st.integers(1, 4), threads=st.sampled_from([1, 31, 32, 33, 96]))
def test_grid_stride_loop_covers_any_size_with_any_launch(n, blocks, threads):
    x = np.arange(n, dtype=np.int32)
    out = np.zeros_like(x)
    run(grid_stride_add, blocks, threads, x, x, out)
    assert np.array_equal(out, 2 * x)


def test_reports_are_plain_data_and_print_as_a_table():
    with simt.profile() as launches:
        copy[1, 32](np.zeros(32, np.float32), np.zeros(32, np.float32))
    json.dumps(launches[0].to_plain())
    text = str(launches)
    assert "kernel copy" in text and "efficiency 100%" in text and "out[i] = x[i]" in text


def test_device_arrays_round_trip():
    x = np.arange(10, dtype=np.float32)
    d, out = cuda.to_device(x), cuda.device_array(10, np.float32)
    copy[1, 32](d, out)
    assert np.array_equal(out.copy_to_host(), x)


# bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("grid, block, match", [
    (0, 32, r"grid \(blocks per grid\) must be between 1 and"),
    (1, 0, r"block \(threads per block\) must be between 1 and 1024"),
    (1, 2048, "between 1 and 1024 along x"),
    (1, (32, 32, 2), "a block holds at most 1024 threads"),
    (1, (1, 1, 65), "between 1 and 64 along z"),
    (1.5, 32, "must be an integer or a tuple"),
    ((1, 1, 1, 1), 32, "must be an integer or a tuple of 1 to 3 integers"),
    (True, 32, "must be an integer"),
])
def test_bad_launch_configuration(grid, block, match):
    with pytest.raises(KernelError, match=match):
        copy[grid, block](np.zeros(1, np.float32), np.zeros(1, np.float32))


def test_bad_launches_and_arguments():
    x = np.zeros(4, np.float32)
    with pytest.raises(KernelError, match=r"needs a launch configuration: copy\[blocks, threads_per_block\]"):
        copy(x, x)
    with pytest.raises(KernelError, match=r"takes 2 arguments \(x, out\), got 1"):
        copy[1, 32](x)
    with pytest.raises(KernelError, match=r"argument 1 \(`out`\) of kernel `copy` is a builtins.list"):
        copy[1, 32](x, [0, 0])
    with pytest.raises(KernelError, match="this launch has 4,194,304 threads"):
        copy[4096, 1024](x, x)


def test_out_of_bounds_and_bad_indices_stop_the_launch_with_the_place():
    x = np.zeros(10, np.float32)
    with pytest.raises(KernelError, match=r"line \d+ of kernel `copy` \(`out\[i\] = x\[i\]`\) tried to read x\[10\]; "
                                          r"x has shape \(10,\)\. Thread \(10, 0, 0\) of block \(0, 0, 0\)"):
        copy[1, 32](x, np.zeros(32, np.float32))
    with pytest.raises(KernelError, match=r"tried to write x\[-1\]"):
        negative_index[1, 1](x)
    with pytest.raises(KernelError, match="an index must be an integer, got float"):
        float_index[1, 1](x)
    with pytest.raises(KernelError, match=r"x has shape \(2, 2\): index it with 2 numbers"):
        wrong_rank[1, 1](np.zeros((2, 2)))


def test_too_much_shared_memory_and_sizes_unknown_at_compile_time():
    with pytest.raises(KernelError, match="need 52000 bytes; a block may declare at most 49152 bytes"):
        too_much_shared[1, 1](np.zeros(1))
    namespace = {}
    exec("from aisys.simt import cuda\nimport numpy as np\n", namespace)
    source = ("@cuda.jit\ndef sized(x, n):\n    s = cuda.shared.array(n, np.float32)\n")
    import linecache
    linecache.cache["<sized>"] = (len(source), None, source.splitlines(True), "<sized>")
    exec(compile(source, "<sized>", "exec"), namespace)
    with pytest.raises(SourceError, match="uses `n`, a variable of the kernel; the size must be known"):
        namespace["sized"][1, 1](np.zeros(1), 3)
    with pytest.raises(SourceError, match="numba cannot compile `TILE \\+ 1` there"):
        padded_by_arithmetic[1, 1](np.zeros(1))


def test_kernel_without_source_and_dialect_outside_kernels():
    namespace = {}
    exec("from aisys.simt import cuda\n@cuda.jit\ndef k(x):\n    x[0] = 1\n", namespace)
    with pytest.raises(SourceError, match="cannot read the source of `k`"):
        namespace["k"][1, 1](np.zeros(1))
    with pytest.raises(KernelError, match="cuda.threadIdx is only meaningful inside a kernel"):
        cuda.threadIdx.x
    with pytest.raises(AttributeError, match="cuda.nonsense is not simulated"):
        cuda.nonsense


@cuda.jit
def divide_by_zero(x):
    x[0] = 1 / 0


def test_errors_inside_a_kernel_name_the_thread():
    with pytest.raises(KernelError, match=r"raised ZeroDivisionError.*thread \(0, 0, 0\) of block \(0, 0, 0\)"):
        divide_by_zero[1, 1](np.zeros(1))


@cuda.jit
def zero_then_add(out):
    s = cuda.shared.array(BLOCK, np.int32)
    s[cuda.threadIdx.x] = 0
    cuda.atomic.add(s, (cuda.threadIdx.x + 1) % BLOCK, 1)  # another thread's word, no barrier after zeroing
    cuda.syncthreads()
    out[cuda.threadIdx.x] = s[cuda.threadIdx.x]


@cuda.jit
def never_initialised(out):
    s = cuda.shared.array(BLOCK, np.int32)
    t = cuda.local.array(1, np.float32)
    out[cuda.threadIdx.x] = s[cuda.threadIdx.x] + (0 if t[0] > 1e30 else 1)


def test_plain_store_racing_with_an_atomic_is_reported():
    (error,) = run(zero_then_add, 1, BLOCK, np.zeros(BLOCK, np.int32))["errors"]
    assert error["kind"] == "race" and "atomically updates" in error["message"]
    assert run(histogram, 1, BLOCK, np.zeros(100, np.int32), np.zeros(1, np.int64))["errors"] == []


def test_shared_and_local_memory_start_as_garbage_not_zeros():
    out = np.zeros(BLOCK, np.int32)
    run(never_initialised, 1, BLOCK, out)
    assert np.all(out == 0x7F7F7F7F)


@cuda.jit
def active_lanes(out):
    out[cuda.threadIdx.x] = cuda.activemask()


def test_activemask_names_the_lanes_that_exist():
    out = np.zeros(48, np.int64)
    run(active_lanes, 1, 48, out)
    assert np.all(out[:32] == 0xFFFFFFFF) and np.all(out[32:] == 0xFFFF)
