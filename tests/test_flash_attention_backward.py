"""The Triton FlashAttention backward: dQ, dK, dV equal torch autograd of plain attention (float64) in the
interpreter, with GQA, bottom-right causal and ragged lengths; bfloat16 at real sizes on a GPU."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aisys.triton_kernels.flash_attention import flash_attention, sdpa
from aisys.triton_kernels.flash_attention_backward import attention, flash_attention_backward


def _inputs(device, batch, n_heads, n_kv_heads, t_q, t_k, head_size, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n_heads, t_q, head_size, generator=g)
    k, v = (torch.randn(batch, n_kv_heads, t_k, head_size, generator=g) for _ in range(2))
    do = torch.randn(batch, n_heads, t_q, head_size, generator=g)
    return tuple(x.to(dtype).to(device) for x in (q, k, v, do))


def _truth(q, k, v, do, causal, scale=None):
    """(dq, dk, dv) by torch autograd of attention written plainly in float64 on the CPU."""
    q, k, v = (x.detach().double().cpu().requires_grad_() for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.repeat_interleave(group, 1).transpose(-1, -2) * scale
    if causal:
        t_q, t_k = q.shape[2], k.shape[2]
        scores = scores.masked_fill(~torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q), float("-inf"))
    out = torch.softmax(scores, -1) @ v.repeat_interleave(group, 1)
    return torch.autograd.grad(out, (q, k, v), do.double().cpu())


SHAPES = [  # B, nh, nkv, Tq, Tk, hs, causal
    (1, 1, 1, 1, 1, 16, True),
    (1, 2, 2, 16, 16, 16, True),  # one block
    (2, 2, 1, 37, 37, 16, True),  # ragged, GQA
    (1, 2, 2, 40, 33, 32, False),  # Tq > Tk
    (1, 4, 2, 5, 40, 16, True),  # chunk: bottom-right, GQA
    (1, 2, 2, 1, 33, 16, True),  # decode
    (1, 1, 1, 20, 20, 128, False),
]


@pytest.mark.parametrize("batch,nh,nkv,t_q,t_k,hs,causal", SHAPES)
def test_equals_autograd(batch, nh, nkv, t_q, t_k, hs, causal, torch_device):
    q, k, v, do = _inputs(torch_device, batch, nh, nkv, t_q, t_k, hs, seed=t_q + 3 * t_k)
    out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
    got = flash_attention_backward(q, k, v, out, lse, do, causal=causal)
    for name, g, x, expected in zip("qkv", got, (q, k, v), _truth(q, k, v, do, causal)):
        assert g.shape == x.shape and g.dtype == x.dtype, name
        torch.testing.assert_close(g.double().cpu(), expected, rtol=1e-4, atol=1e-4, msg=f"d{name}")  # float32 sums


@pytest.mark.parametrize("tuned", [True, False])  # the forward's kernel: the backward needs only its O and lse
def test_autograd_function_and_scale(tuned, torch_device):
    q, k, v, do = _inputs(torch_device, 1, 2, 1, 24, 30, 16, seed=5)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = attention(q, k, v, causal=True, scale=0.3, tuned=tuned)
    torch.testing.assert_close(out, sdpa(q, k, v, causal=True, scale=0.3), rtol=1e-4, atol=1e-5)
    got = torch.autograd.grad(out, (q, k, v), do)
    for g, expected in zip(got, _truth(q, k, v, do, True, scale=0.3)):
        torch.testing.assert_close(g.double().cpu(), expected, rtol=1e-4, atol=1e-4)


def test_bad_inputs(torch_device):
    q, k, v, do = _inputs(torch_device, 1, 2, 2, 8, 8, 16)
    out, lse = flash_attention(q, k, v, return_lse=True)
    cases = [
        (lambda: flash_attention_backward(q, k, v, out[:, :, :4], lse, do), "o must have"),
        (lambda: flash_attention_backward(q, k, v, out, lse, do.half()), "do must have"),
        (lambda: flash_attention_backward(q, k, v, out, lse[:, :1], do), "lse must be"),
        (lambda: flash_attention_backward(q, k, v, out, lse.half(), do), "lse must be"),
        (lambda: flash_attention_backward(q, k, v, out, lse, do, causal=1), "causal"),
        (lambda: flash_attention_backward(q, k, v, out, lse, do, scale=-1.0), "scale"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()


@pytest.mark.gpu  # the interpreter checks float32 only
class TestOnGPU:
    """bfloat16 at real sizes against torch's SDPA backward in float32, within the error SDPA's own bfloat16
    backward makes (the lead runs these on an H100)."""

    @pytest.mark.parametrize("hs", [64, 128])
    @pytest.mark.parametrize("causal", [True, False])
    @pytest.mark.parametrize("shape", [(2, 8, 8, 1024, 1024), (1, 32, 8, 512, 2048)])
    def test_matches_sdpa_backward(self, hs, causal, shape, torch_device):
        batch, nh, nkv, t_q, t_k = shape
        q, k, v, do = _inputs(torch_device, batch, nh, nkv, t_q, t_k, hs, dtype=torch.bfloat16, seed=t_q)

        def grads(fn, *xs):
            xs = [x.detach().requires_grad_() for x in xs]
            return torch.autograd.grad(fn(*xs, causal=causal), xs, do.to(xs[0].dtype))

        truth = grads(sdpa, q.float(), k.float(), v.float())
        ours = grads(attention, q, k, v)
        theirs = grads(sdpa, q, k, v)
        for name, a, b, t in zip("qkv", ours, theirs, truth):
            ours_err = (a.float() - t).abs().max().item()
            sdpa_err = (b.float() - t).abs().max().item()
            assert ours_err <= 2 * sdpa_err + 1e-3, f"d{name}: error {ours_err:.3g}, SDPA's bf16 {sdpa_err:.3g}"


def test_benchmark_script_checks_its_kernel_on_a_cpu(tmp_path):
    """benchmarks/flash_attention_backward.py runs each size once in the interpreter and writes its rows."""
    root = Path(__file__).resolve().parents[1]
    rows = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "flash_attention_backward.py"), "--json",
                           str(rows)], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "AISYS_DEVICE": "cpu", "PYTHONPATH": str(root / "src")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no GPU" in done.stdout
    saved = json.loads(rows.read_text())
    assert len(saved["rows"]) == 4 and all(row["correct"] for row in saved["rows"])
