"""aisys.quant.int8_gemm and its Triton kernel: exact int32 sums, requantization as stated, the fixed-point
multiplier, and benchmarks/quant_int8.py's CPU path."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from aisys.quant import int8_gemm as ref
from aisys.triton_kernels import int8_gemm as tk

ROOT = Path(__file__).resolve().parents[1]


def _codes(seed, *shape):
    return np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)


def test_the_bound_on_k_is_where_int32_would_overflow():
    assert ref.MAX_K == 131071 and 128 * 128 * ref.MAX_K <= 2**31 - 1 < 128 * 128 * (ref.MAX_K + 1)
    assert 255 * 128 * ref.MAX_K_WITH_ZERO_POINT <= 2**31 - 1 < 255 * 128 * (ref.MAX_K_WITH_ZERO_POINT + 1)
    full = np.full((1, ref.MAX_K), -128, np.int8)
    assert ref.int8_matmul(full, full.T.copy())[0, 0] == 128 * 128 * ref.MAX_K
    with pytest.raises(ValueError, match="K = 131072"):
        ref.int8_matmul(np.zeros((1, ref.MAX_K + 1), np.int8), np.zeros((ref.MAX_K + 1, 1), np.int8))
    with pytest.raises(ValueError, match="K = 65794"):
        ref.int8_matmul(np.zeros((1, 65794), np.int8), np.zeros((65794, 1), np.int8), a_zero_point=1)


def test_int8_matmul_is_exact_with_the_zero_point_term():
    a, b = _codes(0, 5, 300), _codes(1, 300, 4)
    zp = np.array([[-128], [127], [0], [3], [-7]])
    got = ref.int8_matmul(a, b, zp)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, (a.astype(np.int64) - zp) @ b.astype(np.int64))
    for bad in (dict(a=a.astype(np.int16), b=b), dict(a=a, b=b[:-1]), dict(a=a, b=b, a_zero_point=200)):
        with pytest.raises(ValueError):
            ref.int8_matmul(**bad)


def test_requantize_rounds_half_to_even_then_adds_the_zero_point_then_clamps():
    acc = np.array([[1, 3, 5, -1, -3, -5, 10**6, -10**6]], np.int32)
    one = np.float32(1)
    got = ref.requantize(acc, one / 2, one, one, 0)
    np.testing.assert_array_equal(got, [[0, 2, 2, 0, -2, -2, 127, -128]])
    assert got.dtype == np.int8
    np.testing.assert_array_equal(ref.requantize(acc[:, :6], one / 2, one, one, 3), [[3, 5, 5, 3, 1, 1]])
    with pytest.raises(ValueError, match="a_scale"):
        ref.requantize(acc, np.ones((2, 1), np.float32), one, one, 0)  # one per row: M is 1
    with pytest.raises(ValueError, match="out_zero_point"):
        ref.requantize(acc, one, one, one, 128)


def test_fixed_point_multiplier_is_gemmlowps():
    m0, shift = ref.quantize_multiplier(0.3)
    assert 2**30 <= m0 < 2**31 and abs(m0 * 2.0 ** (-31 - shift) - 0.3) < 2.0**-31
    acc = np.array([[2, 6, 10, -2, -6, -10]], np.int32)  # times 0.25: halves, the shift rounds them away from 0
    np.testing.assert_array_equal(ref.requantize_fixed_point(acc, 0.25, 0), [[1, 2, 3, -1, -2, -3]])
    big = np.random.default_rng(2).integers(-2**20, 2**20, (64, 64)).astype(np.int32)
    scale_a, scale_b, scale_out = np.float32(0.0123), np.float32(0.00071), np.float32(0.05)
    multiplier = float(np.float64(scale_a) * np.float64(scale_b) / np.float64(scale_out))
    diff = ref.requantize_fixed_point(big, multiplier, 0).astype(int) - ref.requantize(big, scale_a, scale_b,
                                                                                       scale_out, 0)
    assert np.abs(diff).max() <= 1 and np.count_nonzero(diff) < big.size // 100


@pytest.mark.parametrize("M, N, K", [(1, 1, 1), (33, 17, 70), (17, 17, 1041), (40, 65, 130)])
def test_triton_kernel_matches_the_reference(M, N, K, torch_device):
    a, b = _codes(M, M, K), _codes(N, K, N)
    if K == 1041:  # sums past 2**24
        a[:], b[:] = 127, 127
    at, bt = torch.from_numpy(a).to(torch_device), torch.from_numpy(b).to(torch_device)
    acc = ref.int8_matmul(a, b)
    got = tk.int8_gemm(at, bt)
    assert got.dtype == torch.int32
    np.testing.assert_array_equal(got.cpu().numpy(), acc)
    rng = np.random.default_rng(K)
    sa = rng.uniform(1e-3, 1e-2, (M, 1)).astype(np.float32)
    sb = rng.uniform(1e-3, 1e-2, (1, N)).astype(np.float32)
    bias = rng.integers(-1000, 1000, N).astype(np.int32)
    q = tk.int8_gemm(at, bt, output="int8", a_scale=torch.from_numpy(sa).to(torch_device),
                     b_scale=torch.from_numpy(sb).to(torch_device), out_scale=np.float32(0.7), out_zero_point=-3,
                     bias=torch.from_numpy(bias).to(torch_device))
    np.testing.assert_array_equal(q.cpu().numpy(), ref.requantize(acc, sa, sb, np.float32(0.7), -3, bias))
    y = tk.int8_gemm(at, bt, output="float32", a_scale=torch.from_numpy(sa).to(torch_device),
                     b_scale=torch.from_numpy(sb).to(torch_device))
    np.testing.assert_allclose(y.cpu().numpy(), ref.dequantize_acc(acc, sa, sb), rtol=1e-6)  # float32 rounding


def test_benchmark_runs_on_a_cpu(tmp_path):
    out = tmp_path / "int8_gemm.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "quant_int8.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "AISYS_DEVICE": "cpu", "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no GPU" in done.stdout
    saved = json.loads(out.read_text())
    assert saved["rows"] and all(row["correct"] for row in saved["rows"])
