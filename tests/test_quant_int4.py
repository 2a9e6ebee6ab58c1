"""INT4 packing (aisys.quant.int4) and the W4A16 GEMV kernel (aisys.triton_kernels.int4_gemv, in the interpreter
on a CPU), and the benchmark script's CPU path."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from aisys.quant import affine, int4
from aisys.triton_kernels import int4_gemv

ROOT = Path(__file__).resolve().parents[1]


def test_words_bit_for_bit():
    q = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 15]])
    assert int4.pack(q).dtype == np.int32
    assert [int(w) & 0xFFFFFFFF for w in int4.pack(q)[0]] == [0x76543210, 0xF0000000]
    assert [int(w) & 0xFFFFFFFF for w in int4.pack(q, "awq")[0]] == [0x75316420, 0xF0000000]  # 0,2,4,6 low; 1,3,5,7
    assert int4.pack(np.full((1, 8), 15))[0, 0] == -1  # the sign bit: wraps, never saturates
    for order in int4.ORDERS:
        assert (int4.unpack(int4.pack(q, order), order) == q).all()
        assert int4.unpack(int4.pack(q, order), order).dtype == np.uint8
    assert int4.AWQ_REVERSE_ORDER == tuple(int(np.argsort(int4.AWQ_ORDER)[j]) for j in range(8))


def test_every_word_unpacks_and_repacks():
    words = np.random.default_rng(0).integers(-2**31, 2**31, (5, 7)).astype(np.int32)
    for order in int4.ORDERS:
        codes = int4.unpack(words, order)
        assert codes.max() <= 15 and (int4.pack(codes, order) == words).all()
    bytes_ = int4.pack_bytes(int4.unpack(words))
    assert (int4.unpack_bytes(bytes_) == int4.unpack(words)).all() and bytes_[0, 0] == words[0, 0] & 0xFF


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="K .* multiple of 8"):
        int4.pack(np.zeros((2, 12), np.int64))
    with pytest.raises(ValueError, match="q must hold 4-bit codes"):
        int4.pack(np.full((1, 8), 16))
    with pytest.raises(ValueError, match="order must be"):
        int4.pack(np.zeros((1, 8), np.int64), "gptq")
    with pytest.raises(ValueError, match="packed must be an int32"):
        int4.unpack(np.zeros((1, 1), np.int64))


def test_quantize_matches_affine_and_dequantizes_exactly():
    w = np.random.default_rng(1).standard_normal((6, 64)).astype(np.float32)
    q, scales, zeros = int4.quantize(w, 16)
    assert q.dtype == zeros.dtype == np.uint8 and scales.dtype == np.float16 and q.max() <= 15
    signed_q = affine.quantize(w, scales.astype(np.float32), zeros.astype(np.int32) - 8, bits=4, symmetric=False)
    assert (signed_q.astype(np.int16) + 8 == q).all()  # unsigned codes are affine's signed ones plus 8
    w_hat = int4.dequantize(q, scales, zeros)
    exact = (q.astype(np.float64) - np.repeat(zeros, 16, 1)) * np.repeat(scales.astype(np.float64), 16, 1)
    assert (w_hat == exact).all()
    assert np.abs(w_hat - w).max() <= np.repeat(scales.astype(np.float32), 16, 1).max() * 0.5 + 1e-6


def test_bits_and_bytes():
    assert int4.bits_per_weight(128) == 4 + 20 / 128
    assert int4.gemv_speedup_bound(1, 8192, 8192) == pytest.approx(4 / int4.bits_per_weight(128) * 4, rel=1e-3)


@pytest.mark.parametrize("order", int4_gemv.ORDERS)
def test_pack_codes_in_torch_equals_numpy(order):
    q = np.random.default_rng(2).integers(0, 16, (3, 32))
    q[0, 7] = 15
    assert (int4_gemv.pack_codes(torch.from_numpy(q), order).numpy() == int4.pack(q, order)).all()


@pytest.mark.parametrize("m, n, k, group, order", [
    (1, 37, 128, 64, "sequential"), (1, 16, 192, 64, "awq"), (1, 5, 24, 8, "awq"),  # M = 1: the fast kernel
    (3, 20, 200, 40, "awq"), (16, 16, 256, 128, "awq"), (1, 9, 120, 40, "sequential")])  # the skinny kernel
def test_kernel_equals_the_float64_product(m, n, k, group, order):
    rng = np.random.default_rng(3)
    q, scales, zeros = int4.quantize(rng.standard_normal((n, k)), group)
    packed = int4.pack(q, order)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = int4_gemv.w4a16_gemv(torch.from_numpy(x), *(torch.from_numpy(a) for a in (packed, scales, zeros)), order)
    expected = int4.gemv(x, packed, scales, zeros, order)
    bound = (k + 2) * 2.0**-24 * (np.abs(x) @ np.abs(int4.dequantize(q, scales, zeros)).T).max()  # fp32 sums
    assert y.dtype == torch.float32 and np.abs(y.numpy() - expected).max() <= bound


@triton.jit
def _f16(bits):  # the fp16 in the low 16 bits of an int32, as float32
    return (bits & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _emulated_x_pairs(x01, x23, x45, x67):  # what X_PAIRS_ASM computes (PRMT, half2 sums), in Triton operations
    sums = _f16(x01) + _f16(x01 >> 16) + _f16(x23) + _f16(x23 >> 16) + _f16(x45) + _f16(x45 >> 16) + _f16(x67)
    return ((x01 & 0xFFFF) | (x45 << 16), ((x01 >> 16) & 0xFFFF) | (x45 & -65536), (x23 & 0xFFFF) | (x67 << 16),
            ((x23 >> 16) & 0xFFFF) | (x67 & -65536), sums + _f16(x67 >> 16))


@triton.jit
def _emulated_qx(w, p0, p1, p2, p3):  # what QX_ASM computes: pair j holds x for the nibbles j and j + 4
    t = (w & 0xF).to(tl.float32) * _f16(p0) + ((w >> 16) & 0xF).to(tl.float32) * _f16(p0 >> 16)
    t += ((w >> 4) & 0xF).to(tl.float32) * _f16(p1) + ((w >> 20) & 0xF).to(tl.float32) * _f16(p1 >> 16)
    t += ((w >> 8) & 0xF).to(tl.float32) * _f16(p2) + ((w >> 24) & 0xF).to(tl.float32) * _f16(p2 >> 16)
    return t + ((w >> 12) & 0xF).to(tl.float32) * _f16(p3) + ((w >> 28) & 0xF).to(tl.float32) * _f16(p3 >> 16)


@pytest.mark.parametrize("n, k, group, order, block_n, groups", [
    (37, 256, 128, "sequential", 16, 1), (9, 192, 64, "awq", 16, 2), (33, 1024, 128, "sequential", 16, 4)])
def test_fp16_path_moves_the_right_pairs(monkeypatch, n, k, group, order, block_n, groups):
    """The fp16 (PAIRS) path in the interpreter, its two inline-PTX blocks (which a CPU cannot run) replaced by
    Triton emulations of what they compute: x's pairs split, regrouped and broadcast to the right words and rows,
    ragged N and groups masked, the zero points' term (z times the group's sum of x) right."""
    if not int4_gemv.interpreted():
        pytest.skip("Triton's interpreter only: the GPU runs the PTX itself (test_kernel_on_the_gpu_...)")
    monkeypatch.setattr(int4_gemv, "_x_pairs", _emulated_x_pairs)
    monkeypatch.setattr(int4_gemv, "_qx", _emulated_qx)
    rng = np.random.default_rng(4)
    q, scales, zeros = int4.quantize(rng.standard_normal((n, k)), group)
    packed = int4.pack(q, order)
    x = rng.standard_normal((1, k)).astype(np.float16)
    y = torch.empty(1, n, dtype=torch.float32)
    kernel = int4_gemv.w4a16_gemv_kernel.fn.fn  # under the autotuner and the heuristics
    kernel[(-(-n // block_n),)](torch.from_numpy(x), *(torch.from_numpy(a) for a in (packed, scales, zeros)), y, n,
                                k, k // 8, k // group, int4_gemv.MAGIC, GROUP_SIZE=group, AWQ=order == "awq",
                                PAIRS=True, BLOCK_N=block_n, GROUPS=groups, STAGES=1, EVEN_N=n % block_n == 0,
                                EVEN_GROUPS=(k // group) % groups == 0)
    expected = int4.gemv(x.astype(np.float64), packed, scales, zeros, order)
    assert np.abs(y.numpy() - expected).max() <= 1e-5 * np.abs(expected).max()  # float32 sums of exact products


@pytest.mark.parametrize("order", int4_gemv.ORDERS)
def test_gemv_kernel_compiles_for_an_h100_as_designed(order):
    """The batch-1 kernel's fp16 path, compiled for sm_90 on this CPU: no spills, the words copied 16 bytes at a time
    into the pipeline (LDGSTS.128), the codes multiplied in half2 (HFMA2; no int-to-float conversion in the hot
    loop but the zero points'), under 3.5 instructions per weight (the float32 design it replaced took 4.3 to 5.7:
    the module's docstring), and x's pairs regrouped once per word of x a thread holds, not once per row (PRMT)."""
    from aisys import ptx
    from aisys.triton_compile import compile_for_gpu

    n, k, group, block_n, groups, warps = 4096, 4096, 128, 16, 8, 4
    args = (torch.zeros(1, k, dtype=torch.float16), torch.zeros(n, k // 8, dtype=torch.int32),
            torch.zeros(n, k // group, dtype=torch.float16), torch.zeros(n, k // group, dtype=torch.uint8),
            torch.zeros(1, n, dtype=torch.float16), n, k, k // 8, k // group, int4_gemv.MAGIC)
    compiled = compile_for_gpu(int4_gemv.w4a16_gemv_kernel, *args, num_warps=warps, num_stages=1, GROUP_SIZE=group,
                               AWQ=order == "awq", PAIRS=True, BLOCK_N=block_n, GROUPS=groups, STAGES=3,
                               EVEN_N=True, EVEN_GROUPS=True)
    assert ptx.resource_usage(compiled.ptx, compiled.arch)["spill_stores"] == 0
    sass = ptx.sass(compiled.ptx, compiled.arch)
    assert "LDGSTS.E.BYPASS.128" in sass
    lines = [(int(m[1], 16), m[2]) for m in re.finditer(r"/\*([0-9a-f]{4,5})\*/\s+([^;]*);", sass)]
    loops = [(int(target, 16), at) for at, text in lines
             if (target := re.search(r"BRA 0x([0-9a-f]+)", text) and re.search(r"BRA 0x([0-9a-f]+)", text)[1])
             and int(target, 16) < at]
    start, end = max(loops, key=lambda loop: loop[1] - loop[0])
    body = [text for at, text in lines if start <= at <= end]
    weights_per_thread = block_n * groups * group // (32 * warps)
    # codes become floats by the exponent trick; I2F only for the zero points, one per row and group a thread holds
    assert sum("I2F" in text for text in body) <= max(1, block_n * groups // (32 * warps))
    assert sum(text.startswith("HFMA2") for text in body) >= weights_per_thread // 8 * 3  # 3 x-FMAs a word
    words = weights_per_thread // 8  # words of W a thread multiplies per step
    assert 2 * sum("PRMT" in text for text in body) <= 4 * words  # 4 a word of x, shared by 2 or more rows
    assert len(body) / weights_per_thread < 3.5, len(body) / weights_per_thread


def test_kernel_refuses_what_it_cannot_run():
    packed, scales, zeros, _ = int4_gemv.random_weights(8, 64, 32)
    with pytest.raises(ValueError, match="x must have 1 to 16 rows"):
        int4_gemv.w4a16_gemv(torch.zeros(17, 64), packed, scales, zeros)
    with pytest.raises(ValueError, match="packed must be int32"):
        int4_gemv.w4a16_gemv(torch.zeros(1, 72), packed, scales, zeros)


def test_benchmark_script_checks_the_kernel_on_a_cpu(tmp_path):
    rows = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "quant_w4a16.py"), "--out", str(rows)],
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "AISYS_DEVICE": "cpu", "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no GPU" in done.stdout
    saved = json.loads(rows.read_text())
    assert saved["rows"] and all(row["correct"] for row in saved["rows"])


@pytest.mark.gpu  # the lead's run
def test_kernel_on_the_gpu_against_fp16_linear():
    for m, n, k, order in [(1, 11008, 4096, "awq"), (1, 4096, 11008, "sequential"), (1, 1000, 1536, "awq"),
                           (1, 1000, 1536, "sequential"), (4, 4096, 11008, "awq"), (16, 1000, 1024, "awq")]:
        packed, scales, zeros, w = int4_gemv.random_weights(n, k, 128, order, device="cuda")  # ragged N, odd groups
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        y = int4_gemv.w4a16_gemv(x, packed, scales, zeros, order)
        torch.testing.assert_close(y.float(), (x.float() @ w.float().T), rtol=1e-2, atol=5e-3)
        if m == 1:  # fp16 x up to 1000 (the half2 products' bound: the module's docstring), and bf16 x
            x = (torch.rand(m, k, device="cuda") * 2000 - 1000).half()
            y = int4_gemv.w4a16_gemv(x, packed, scales, zeros, order)
            torch.testing.assert_close(y.float(), (x.float() @ w.float().T), rtol=1e-2, atol=5e-3 * 1000)
            x = x.bfloat16() / 1000
            y = int4_gemv.w4a16_gemv(x, packed, scales, zeros, order)
            torch.testing.assert_close(y.float(), (x.float() @ w.float().T), rtol=1e-2, atol=5e-3)
