"""Triton kernels compiled for an H100 with no GPU: layouts, load widths, shuffles and shared memory."""

import re

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from aisys import ptx  # noqa: E402
from aisys.triton_compile import compile_for_gpu, readable  # noqa: E402


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def row_sum(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * n_cols + offsets, mask=offsets < n_cols, other=0.0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(x, axis=0))


def global_loads(code):
    return set(re.findall(r"\bld\.global[.\w]*", code))


@pytest.fixture(scope="module")
def vectors():
    return torch.empty(4096), torch.empty(4096), torch.empty(4096)


def test_a_launch_on_aligned_data_gets_16_byte_loads_and_a_ragged_one_does_not(vectors):
    aligned = compile_for_gpu(add, *vectors, 4096, BLOCK=1024)
    ragged = compile_for_gpu(add, *vectors, 4095, BLOCK=1024)
    assert aligned.arch == "sm_90a" and aligned.num_warps == 4
    assert "sizePerThread = [4]" in aligned.layouts()["#blocked"]
    assert global_loads(aligned.ptx) == {"ld.global.v4.b32"}
    assert global_loads(ragged.ptx) == {"ld.global.b32"}  # the mask may end inside a vector
    assert "tt.divisibility = 16" in aligned.ttir and " loc(" not in readable(aligned.ttgir)
    assert ptx.resource_usage(aligned.ptx, aligned.arch)["spill_stores"] == 0


def test_a_block_reduction_becomes_warp_shuffles_and_shared_memory_across_warps():
    compiled = compile_for_gpu(row_sum, torch.empty(8, 1024), torch.empty(8), 1024, BLOCK=1024, num_warps=8)
    assert "warpsPerCTA = [8]" in compiled.layouts()["#blocked"]
    assert compiled.ptx.count("shfl.sync.bfly") >= 5 and "bar.sync" in compiled.ptx
    assert compiled.shared_bytes == 8 * 4  # one partial sum per warp


@pytest.mark.parametrize("call, error", [
    (lambda v: compile_for_gpu(lambda x: x, *v), TypeError),
    (lambda v: compile_for_gpu(add, *v, 16), TypeError),  # BLOCK missing
    (lambda v: compile_for_gpu(add, *v, 16, BLOCK=64, size=3), TypeError),
    (lambda v: compile_for_gpu(add, *v, 16, BLOCK=64, num_warps=3), ValueError),
    (lambda v: compile_for_gpu(add, *v, "16", BLOCK=64), TypeError),
    (lambda v: compile_for_gpu(add, *v, 16, BLOCK=64, cc=9), ValueError),
])
def test_bad_arguments_are_named(vectors, call, error):
    with pytest.raises(error):
        call(vectors)


def test_a_kernel_that_does_not_compile_says_why(vectors):
    with pytest.raises(RuntimeError, match="arange's range must be a power of 2"):
        compile_for_gpu(add, *vectors, 4096, BLOCK=1000)


def test_one_compiler_process_serves_every_call_and_a_dead_one_is_replaced(vectors):
    from aisys import triton_compile

    compile_for_gpu(add, *vectors, 4096, BLOCK=1024)
    process = triton_compile._COMPILER.process
    again = compile_for_gpu(row_sum, torch.empty(8, 1024), torch.empty(8), 1024, BLOCK=1024)
    assert triton_compile._COMPILER.process is process and process.poll() is None
    assert "shfl.sync.bfly" in again.ptx
    process.kill()
    process.wait()
    assert global_loads(compile_for_gpu(add, *vectors, 4096, BLOCK=1024).ptx) == {"ld.global.v4.b32"}
    assert triton_compile._COMPILER.process is not process
