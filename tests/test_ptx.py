"""PTX, SASS and ptxas's resource report of numba kernels, compiled with no GPU."""

import pytest

numba = pytest.importorskip("numba")
from numba import cuda, float32, int32  # noqa: E402

from aisys import ptx  # noqa: E402


def add(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + y[i]


def transpose_tile(a, out):
    tile = cuda.shared.array((32, 33), float32)  # one column of padding
    x, y = cuda.threadIdx.x, cuda.threadIdx.y
    tile[y, x] = a[y, x]
    cuda.syncthreads()
    out[y, x] = tile[x, y]


def many_live_values(a, out):
    # 64 values are live at once across the loop, so they cannot all stay in 32 registers.
    i = cuda.grid(1)
    acc = cuda.local.array(64, float32)
    for k in range(64):
        acc[k] = a[(i + k) % a.size]
    total = float32(0)
    for k in range(64):
        total += acc[k] * acc[63 - k]
    out[i] = total


VECTORS = (float32[::1], float32[::1], float32[::1])  # C-contiguous: numba knows the stride


@pytest.fixture(scope="module")
def add_ptx():
    return ptx.ptx(add, VECTORS)


def test_ptx_is_text_for_the_requested_target(add_ptx):
    assert ".target sm_90" in add_ptx and ".entry" in add_ptx
    assert "add.f32" in add_ptx and "%tid.x" in add_ptx and "%ctaid.x" in add_ptx
    assert ".target sm_80" in ptx.ptx(add, VECTORS, cc=(8, 0))


def test_a_signature_string_works_too():
    assert ".entry" in ptx.ptx(add, "void(float32[:], float32[:], float32[:])")


def test_an_array_of_unknown_layout_gets_generic_loads_and_more_arithmetic(add_ptx):
    strided = ptx.ptx(add, (float32[:], float32[:], float32[:]))
    assert "ld.global.f32" in add_ptx and "ld.global.f32" not in strided and "ld.f32" in strided
    assert ptx.resource_usage(strided)["registers"] > ptx.resource_usage(add_ptx)["registers"]


def test_sass_is_hopper_machine_code(add_ptx):
    code = ptx.sass(add_ptx)
    assert "sm_90" in code
    for instruction in ("S2R", "LDG.E", "FADD", "STG.E", "EXIT"):
        assert instruction in code, instruction
    assert "/* 0x" not in code  # encodings are stripped


def test_resource_usage_reads_registers_and_shared_memory(add_ptx):
    usage = ptx.resource_usage(add_ptx)
    assert 4 <= usage["registers"] <= 64 and usage["shared_bytes"] == 0 and usage["barriers"] == 0
    tiled = ptx.resource_usage(ptx.ptx(transpose_tile, (float32[:, :], float32[:, :])))
    assert tiled["shared_bytes"] == 32 * 33 * 4 and tiled["barriers"] == 1


def test_a_thread_that_holds_an_array_uses_a_stack_frame():
    usage = ptx.resource_usage(ptx.ptx(many_live_values, (float32[:], float32[:])))
    assert usage["stack_bytes"] >= 64 * 4 or usage["registers"] >= 64


def test_bad_arguments_name_the_argument(add_ptx):
    with pytest.raises(TypeError, match="kernel_function"):
        ptx.ptx("add", VECTORS)
    with pytest.raises(TypeError, match="signature"):
        ptx.ptx(add, ())
    with pytest.raises(ValueError, match="cc"):
        ptx.ptx(add, VECTORS, cc=90)
    with pytest.raises(ValueError, match="arch"):
        ptx.sass(add_ptx, arch="hopper")
    with pytest.raises(ValueError, match="ptx_text"):
        ptx.resource_usage("not ptx")
    with pytest.raises(ValueError, match="name"):
        ptx.tool("nvcc")


def test_ptxas_errors_are_reported():
    with pytest.raises(RuntimeError, match="ptxas"):
        ptx.sass(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry broken() { bogus.instruction; }")


def test_a_missing_tool_says_which_wheel_to_install(monkeypatch):
    monkeypatch.setattr(ptx.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(ptx.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install nvidia-cuda-nvcc"):
        ptx.tool("ptxas")


def test_int_arguments_compile():
    def scale(x, n):
        i = cuda.grid(1)
        if i < n:
            x[i] *= 2

    assert "mul" in ptx.ptx(scale, (int32[:], int32)) or "shl" in ptx.ptx(scale, (int32[:], int32))


def test_a_simulator_kernel_with_a_device_function_compiles_unchanged():
    from aisys.simt import cuda as simt_cuda

    @simt_cuda.jit(device=True)
    def warp_sum(v):
        for offset in (16, 8, 4, 2, 1):
            v += simt_cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        return v

    @simt_cuda.jit
    def total(x, out):
        v = warp_sum(x[simt_cuda.grid(1)])
        if simt_cuda.laneid == 0:
            simt_cuda.atomic.add(out, 0, v)

    text = ptx.ptx(total, (float32[::1], float32[::1]))
    assert text.count("shfl.sync.down.b32") == 5 and "atom.global.add.f32" in text
