"""The roofline reference: known values, the shape of the model, and clear errors on nonsense."""

import math

import pytest
from hypothesis import given, strategies as st

from aisys import dtypes, roofline
from aisys.hardware import CHIPS, chip

H100 = chip("NVIDIA H100 SXM5 80GB")


def test_gemm_counts_a_multiply_add_as_two_flops_and_each_matrix_once():
    cost = roofline.gemm(4096, 4096, 4096, "bf16")
    assert cost.flops == 2 * 4096**3
    assert cost.bytes == 3 * 4096**2 * 2
    assert cost.intensity == pytest.approx(4096 / 3)


def test_gemv_is_a_gemm_with_one_column_and_is_memory_bound_on_every_gpu():
    assert roofline.gemv(8192, 8192, "fp16") == roofline.gemm(8192, 1, 8192, "fp16")
    intensity = roofline.gemv(8192, 8192, "fp16").intensity
    assert intensity == pytest.approx(1.0, rel=1e-3)  # 2 FLOPs per 2-byte weight
    for gpu in (c for c in CHIPS.values() if c.kind == "gpu"):
        assert roofline.bound(gpu.peak("fp16"), gpu.memory_bandwidth, intensity) == "memory"


def test_elementwise_and_softmax_read_and_write():
    add = roofline.elementwise(1000, "fp32", inputs=2, outputs=1)
    assert (add.flops, add.bytes) == (1000, 12000)
    soft = roofline.softmax(4, 256, "fp16")
    assert (soft.flops, soft.bytes) == (5 * 1024, 2 * 1024 * 2)


def test_attainable_is_min_of_the_roofs_and_meets_at_the_ridge():
    ridge = roofline.ridge_point(H100.peak("bf16"), H100.memory_bandwidth)
    assert ridge == pytest.approx(989.4e12 / 3.35e12)
    assert roofline.attainable(1e12, 1e11, 10.0) == 1e12
    assert roofline.attainable(1e12, 1e11, 1.0) == 1e11
    assert roofline.attainable(1e12, 1e11, 0.0) == 0.0
    assert roofline.attainable(1e12, 1e11, math.inf) == 1e12
    assert roofline.bound(1e12, 1e11, 10.0) == "compute"
    assert roofline.bound(1e12, 1e11, 9.999) == "memory"


@given(st.floats(1e9, 1e16), st.floats(1e9, 1e13), st.floats(0, 1e6))
def test_attainable_never_exceeds_either_roof(peak, bandwidth, intensity):
    value = roofline.attainable(peak, bandwidth, intensity)
    assert value <= peak and value <= bandwidth * intensity * (1 + 1e-12)


def test_classify_gives_time_at_the_attainable_rate():
    result = roofline.classify(roofline.gemm(8192, 8192, 8192, "bf16"), H100.peak("bf16"), H100.memory_bandwidth)
    assert result["bound"] == "compute"
    assert result["seconds"] == pytest.approx(2 * 8192**3 / 989.4e12)
    copy = roofline.classify(roofline.Cost(flops=0, bytes=1e9), H100.peak("bf16"), H100.memory_bandwidth)
    assert (copy["bound"], copy["attainable_flops"]) == ("memory", 0.0)
    assert copy["seconds"] == pytest.approx(1e9 / 3.35e12)


def test_dtype_sizes_and_aliases():
    assert dtypes.bytes_per_element("int4") == 0.5
    assert dtypes.bytes_per_element("tf32") == 4
    assert dtypes.bytes_per_element("bfloat16") == dtypes.bytes_per_element("bf16") == 2


def test_every_chip_has_a_source_and_sane_numbers():
    for c in CHIPS.values():
        assert c.source and c.kind in ("gpu", "cpu", "tpu")
        assert 1e9 < c.memory_bandwidth < 1e14 and c.memory_bytes > 1e9
        for dtype, flops in c.peak_flops.items():
            assert dtype in dtypes.BITS and 1e11 < flops < 1e16
        assert 0.1 < c.ridge_point(next(iter(c.peak_flops))) < 2000


def test_h200_has_h100_compute_and_more_bandwidth():
    h200 = chip("NVIDIA H200 SXM 141GB")
    assert h200.peak_flops == H100.peak_flops
    assert h200.memory_bandwidth / H100.memory_bandwidth == pytest.approx(4.8 / 3.35)


@pytest.mark.parametrize("call, argument", [
    (lambda: roofline.gemm(-1, 2, 3), "M"),
    (lambda: roofline.gemm(2, 0, 3), "N"),
    (lambda: roofline.gemm(2, 2, 2.5), "K"),
    (lambda: roofline.gemm(2, 2, True), "K"),
    (lambda: roofline.gemm(2, 2, 2, "fp12"), "dtype"),
    (lambda: roofline.softmax(0, 3), "rows"),
    (lambda: roofline.elementwise(10, inputs=0), "inputs"),
    (lambda: roofline.attainable(1e12, 0, 1.0), "bandwidth"),
    (lambda: roofline.attainable(-1, 1e9, 1.0), "peak_flops"),
    (lambda: roofline.attainable(1e12, 1e9, float("nan")), "intensity"),
    (lambda: roofline.attainable(1e12, 1e9, -2), "intensity"),
    (lambda: roofline.ridge_point(1e12, float("inf")), "bandwidth"),
    (lambda: chip("NVIDIA B300"), "name"),
    (lambda: roofline.Cost(-5, 10), "flops"),
    (lambda: roofline.Cost(5, "ten"), "bytes"),
    (lambda: H100.peak("int4"), "dtype"),
])
def test_nonsense_is_rejected_with_the_argument_named(call, argument):
    with pytest.raises(ValueError, match=rf"^{argument}\b"):
        call()


def test_tensor_core_instruction_shapes():
    from aisys.dtypes import BITS
    from aisys.hardware import MMA_SHAPES, peak_formula

    warp = MMA_SHAPES["mma.sync.m16n8k16"].threads
    for shape in MMA_SHAPES.values():
        assert shape.instruction.endswith(f"m{shape.m}n{shape.n}k{shape.k}")
        assert shape.fmas == shape.m * shape.n * shape.k
        assert shape.threads in (warp, 4 * warp)  # a warp, or a warpgroup of four
        assert all(dtype in H100.peak_flops for dtype in shape.dtypes)
        # every shape's K step covers 256 bits of a row of A, whatever the format (PTX ISA's shape tables)
        assert {shape.k * BITS[dtype] for dtype in shape.dtypes} == {256}
    wgmma, tc = MMA_SHAPES["wgmma.mma_async.m64n256k16"], peak_formula(H100.name, "bf16")
    assert wgmma.fmas / (tc.parts * tc.flops_per_clock // 2) == 128  # clocks of an SM's Tensor Cores
