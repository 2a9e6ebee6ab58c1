"""The Triton FlashAttention forward: equal to softmax attention (float64) in the interpreter; against SDPA on a GPU."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aisys.triton_kernels.flash_attention import flash_attention, sdpa



def _qkv(device, batch, n_heads, n_kv_heads, t_q, t_k, head_size, dtype=torch.float32, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = scale * torch.randn(batch, n_heads, t_q, head_size, generator=g)
    k, v = (torch.randn(batch, n_kv_heads, t_k, head_size, generator=g) for _ in range(2))
    return tuple(x.to(dtype).to(device) for x in (q, k, v))


def _truth(q, k, v, causal):
    """(O, lse) in float64 on the CPU, written plainly: every score, masked bottom-right."""
    q, k, v = (x.double().cpu() for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        t_q, t_k = q.shape[2], k.shape[2]
        scores = scores.masked_fill(~torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q), float("-inf"))
    return torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)


SHAPES = [  # B, nh, nkv, Tq, Tk, hs, causal
    (1, 1, 1, 1, 1, 16, True),
    (1, 2, 2, 16, 16, 16, True),  # exactly one block
    (2, 2, 1, 37, 37, 16, True),  # ragged, GQA
    (2, 2, 2, 50, 50, 32, False),
    (1, 4, 2, 5, 40, 16, True),  # chunked prefill: bottom-right
    (1, 2, 2, 1, 33, 64, True),  # decode
    (1, 2, 2, 33, 20, 16, False),  # Tq > Tk
    (1, 1, 1, 20, 20, 128, True),
]


@pytest.mark.parametrize("batch,nh,nkv,t_q,t_k,hs,causal", SHAPES)
def test_equals_softmax_attention(batch, nh, nkv, t_q, t_k, hs, causal, torch_device):
    q, k, v = _qkv(torch_device, batch, nh, nkv, t_q, t_k, hs, seed=t_q + t_k)
    out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
    expected, expected_lse = _truth(q, k, v, causal)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (batch, nh, t_q)
    tol = 1e-5
    torch.testing.assert_close(out.double().cpu(), expected, rtol=tol, atol=tol)
    torch.testing.assert_close(lse.double().cpu(), expected_lse, rtol=tol, atol=tol)


@pytest.mark.parametrize("batch,nh,nkv,t_q,t_k,hs,causal", SHAPES[1:5] + SHAPES[6:7])
def test_tuned_kernel_equals_softmax_attention(batch, nh, nkv, t_q, t_k, hs, causal, torch_device):
    # The tensor-descriptor kernel: ragged ends come as zeros from the descriptors and are masked or clipped.
    q, k, v = _qkv(torch_device, batch, nh, nkv, t_q, t_k, hs, seed=t_q + t_k)
    out, lse = flash_attention(q, k, v, causal=causal, return_lse=True, tuned=True)
    expected, expected_lse = _truth(q, k, v, causal)
    assert out.shape == q.shape and out.dtype == q.dtype
    torch.testing.assert_close(out.double().cpu(), expected, rtol=1e-5, atol=1e-5)  # as the readable kernel's
    torch.testing.assert_close(lse.double().cpu(), expected_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_large_logits(causal, torch_device):
    """Scores near +-1000: exp overflows float32 past 88.7 unless the running max is subtracted."""
    q, k, v = _qkv(torch_device, 1, 2, 2, 40, 40, 16, scale=300.0, seed=1)
    out = flash_attention(q, k, v, causal=causal)
    assert torch.isfinite(out).all()
    expected, _ = _truth(q, k, v, causal)
    torch.testing.assert_close(out.double().cpu(), expected, rtol=1e-3, atol=1e-3)


def test_scale_and_matches_sdpa(torch_device):
    q, k, v = _qkv(torch_device, 1, 2, 2, 24, 24, 16, seed=2)
    torch.testing.assert_close(flash_attention(q, k, v, causal=True, scale=0.3), sdpa(q, k, v, causal=True, scale=0.3),
                               rtol=1e-4, atol=1e-5)


def test_bad_inputs(torch_device):
    q, k, v = _qkv(torch_device, 1, 2, 2, 8, 8, 16)
    cases = [
        (lambda: flash_attention(q[0], k, v), "q must be a 4-D tensor"),
        (lambda: flash_attention(q, k.double(), v), "k must have dtype"),
        (lambda: flash_attention(q, k.half(), v), "one dtype"),
        (lambda: flash_attention(q, k, v[:, :, :4]), "k and v"),
        (lambda: flash_attention(q[..., :8], k[..., :8], v[..., :8]), "head size"),
        (lambda: flash_attention(q, k[:1, :1].expand(2, 1, 8, 16), v[:1, :1].expand(2, 1, 8, 16)), "batch"),
        (lambda: flash_attention(q[:, :, :, :16].repeat(1, 3, 1, 1)[:, :3], k, v), "multiple"),
        (lambda: flash_attention(q[:, :, :0], k, v), "empty"),
        (lambda: flash_attention(q, k[:, :, :4], v[:, :, :4], causal=True), "Tq <= Tk"),
        (lambda: flash_attention(q, k, v, causal=1), "causal"),
        (lambda: flash_attention(q, k, v, scale=0.0), "scale"),
        (lambda: flash_attention(q, k, v, tuned=1), "tuned must be True or False"),
        (lambda: flash_attention(q.numpy() if torch_device == "cpu" else q.cpu(), k, v), "q must be"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()


@pytest.mark.gpu  # the interpreter checks float32 only
class TestOnGPU:
    """Against torch's SDPA in bfloat16 and float16 at sizes of real models (the lead runs these on an H100)."""

    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
    @pytest.mark.parametrize("hs", [64, 128])
    @pytest.mark.parametrize("causal", [True, False])
    @pytest.mark.parametrize("t", [1000, 4096])
    def test_matches_sdpa(self, dtype, hs, causal, t, torch_device):
        q, k, v = _qkv(torch_device, 2, 8, 8, t, t, hs, dtype=dtype, seed=t)
        expected = sdpa(q.float(), k.float(), v.float(), causal=causal)  # float32 truth on the GPU
        atol = 2e-2 if dtype == torch.bfloat16 else 2e-3
        torch.testing.assert_close(flash_attention(q, k, v, causal=causal).float(), expected, rtol=0, atol=atol)
        torch.testing.assert_close(flash_attention(q, k, v, causal=causal, tuned=True).float(), expected, rtol=0,
                                   atol=atol)
        torch.testing.assert_close(sdpa(q, k, v, causal=causal).float(), expected, rtol=0, atol=atol)  # same bar

    def test_gqa_and_chunk(self, torch_device):
        q, k, v = _qkv(torch_device, 1, 32, 8, 512, 2048, 128, dtype=torch.bfloat16, seed=3)
        expected = sdpa(q.float(), k.float(), v.float(), causal=True)
        torch.testing.assert_close(flash_attention(q, k, v, causal=True).float(), expected, rtol=0, atol=2e-2)
        torch.testing.assert_close(flash_attention(q, k, v, causal=True, tuned=True).float(), expected, rtol=0,
                                   atol=2e-2)


def test_benchmark_script_checks_its_kernel_on_a_cpu(tmp_path):
    """benchmarks/flash_attention.py runs each size once in the interpreter and writes its rows (measures nothing)."""
    root = Path(__file__).resolve().parents[1]
    rows = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "flash_attention.py"), "--json", str(rows)],
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "AISYS_DEVICE": "cpu", "PYTHONPATH": str(root / "src")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no GPU" in done.stdout
    saved = json.loads(rows.read_text())
    assert saved["rows"] and all(row["correct"] for row in saved["rows"])
