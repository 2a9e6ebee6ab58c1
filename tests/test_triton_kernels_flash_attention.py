"""The Triton FlashAttention forward: equal to softmax attention (float64) in the interpreter; against SDPA on a GPU.
Both kernels: the tuned one (tensor descriptors), the default, and the readable one, which tuned=False selects and
the default falls back to where TMA cannot run."""

import functools
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from aisys.triton_kernels import flash_attention as fa
from launches import record_launches
from aisys.triton_kernels.flash_attention import flash_attention, sdpa

KERNELS = {"readable": "flash_attention_kernel", "tuned": "flash_attention_tma_kernel"}


@pytest.fixture
def launched(monkeypatch):
    """The kinds ("readable", "tuned") of the forward kernels launched during the test, in order."""
    return record_launches(monkeypatch, fa, {attribute: kind for kind, attribute in KERNELS.items()})


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


@pytest.mark.parametrize("tuned", [None, False])  # None: the default
@pytest.mark.parametrize("batch,nh,nkv,t_q,t_k,hs,causal", SHAPES)
def test_equals_softmax_attention(batch, nh, nkv, t_q, t_k, hs, causal, tuned, torch_device, launched):
    # The default takes every shape to the tuned kernel (GQA, bottom-right causal, Tq > Tk, a single token, every
    # head size): ragged ends come as zeros from its descriptors and are masked or clipped.
    q, k, v = _qkv(torch_device, batch, nh, nkv, t_q, t_k, hs, seed=t_q + t_k)
    out, lse = flash_attention(q, k, v, causal=causal, return_lse=True, **({} if tuned is None else {"tuned": tuned}))
    assert launched == ["readable" if tuned is False else "tuned"]
    expected, expected_lse = _truth(q, k, v, causal)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (batch, nh, t_q)
    tol = 1e-5
    torch.testing.assert_close(out.double().cpu(), expected, rtol=tol, atol=tol)
    torch.testing.assert_close(lse.double().cpu(), expected_lse, rtol=tol, atol=tol)


def _unaligned(x):
    """x's values in a tensor whose data starts one element past a 16-byte boundary."""
    storage = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
    view = storage[1:].view(x.shape)
    view.copy_(x)
    assert view.data_ptr() % 16
    return view


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_unaligned_tensor_falls_back_to_the_readable_kernel(which, torch_device, launched):
    # TMA copies from 16-byte aligned addresses only: the default runs the readable kernel, with its results.
    q, k, v = _qkv(torch_device, 1, 4, 2, 21, 37, 16, seed=4)
    args = {"q": q, "k": k, "v": v}
    args[which] = _unaligned(args[which])
    assert fa.tma_refusal(q.device, args.values()) == "TMA needs tensors whose start is 16-byte aligned"
    out, lse = flash_attention(**args, causal=True, return_lse=True)
    readable, readable_lse = flash_attention(**args, causal=True, return_lse=True, tuned=False)
    assert launched == ["readable", "readable"]
    assert torch.equal(out, readable) and torch.equal(lse, readable_lse)
    expected, _ = _truth(q, k, v, True)
    torch.testing.assert_close(out.double().cpu(), expected, rtol=1e-5, atol=1e-5)


def test_triton_without_tensor_descriptors_runs_the_readable_kernel(torch_device, launched, monkeypatch):
    q, k, v = _qkv(torch_device, 2, 2, 1, 37, 37, 16, seed=5)
    expected = flash_attention(q, k, v, causal=True, tuned=False)
    monkeypatch.setattr(fa, "TensorDescriptor", None)
    assert "tensor descriptors" in fa.tma_refusal(q.device, (q, k, v))
    assert torch.equal(flash_attention(q, k, v, causal=True), expected)
    assert launched == ["readable", "readable"]


def test_gpus_before_hopper_are_refused_by_the_tuned_kernel(monkeypatch):
    # Checked on the refusal itself: the interpreter has no GPU to launch on (the launch follows it, as above).
    capability = {"value": (8, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability["value"])
    assert "Hopper" in fa.tma_refusal(torch.device("cuda"), ())
    capability["value"] = (9, 0)
    assert fa.tma_refusal(torch.device("cuda"), ()) is None
    capability["value"] = (8, 0)
    assert fa.tma_refusal(torch.device("cpu"), ()) is None  # the interpreter runs descriptors on the CPU


def test_tuned_configs_kept_are_those_that_fit():
    # The GPU's list, pruned per launch (checked here on the host: the interpreter runs one 16 x 16 config).
    def kept(dtype, head_dim):
        named = {"desc_q": SimpleNamespace(base=torch.empty(0, dtype=dtype))}
        return fa._tma_fitting_configs(fa.TMA_GPU_CONFIGS, named, HEAD_DIM=head_dim)

    at_64 = [fa._shape(c) for c in kept(torch.bfloat16, 64)]
    assert set(at_64) == fa.HEAD_64_CONFIGS and (128, 128, 3, 4) in at_64  # measured fast: 4-warp 128 x 128 too
    at_128 = [fa._shape(c) for c in kept(torch.bfloat16, 128)]
    assert (128, 128, 3, 8) in at_128 and (128, 128, 3, 4) not in at_128  # 4 warps would spill at hs 128
    for dtype in (torch.float32, torch.float16):
        for head_dim in fa.HEAD_SIZES:
            for config in kept(dtype, head_dim):
                block_m, block_n, stages, _ = fa._shape(config)
                assert (block_m + 2 * block_n * stages) * head_dim * dtype.itemsize <= fa.SHARED_MEMORY
            assert kept(dtype, head_dim)
            if head_dim > 64:  # (at 64 and below the measured fast tiles only; a pinned test runs the first anyway)
                assert fa.TMA_GPU_CONFIGS[0] in kept(dtype, head_dim)  # the config the pinned GPU tests run
    assert len(kept(torch.float32, 128)) < len(kept(torch.bfloat16, 128))  # float32 tiles take twice the bytes


@pytest.mark.parametrize("tuned", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_large_logits(causal, tuned, torch_device):
    """Scores near +-1000: exp overflows float32 past 88.7 unless the running max is subtracted."""
    q, k, v = _qkv(torch_device, 1, 2, 2, 40, 40, 16, scale=300.0, seed=1)
    out = flash_attention(q, k, v, causal=causal, tuned=tuned)
    assert torch.isfinite(out).all()
    expected, _ = _truth(q, k, v, causal)
    torch.testing.assert_close(out.double().cpu(), expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("tuned", [True, False])
def test_scale_and_matches_sdpa(tuned, torch_device):
    q, k, v = _qkv(torch_device, 1, 2, 2, 24, 24, 16, seed=2)
    torch.testing.assert_close(flash_attention(q, k, v, causal=True, scale=0.3, tuned=tuned),
                               sdpa(q, k, v, causal=True, scale=0.3), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("tuned", [True, False])
def test_bad_inputs(tuned, torch_device):
    # Both kernels refuse the same inputs: no head size is left to a fallback (TMA takes every one the readable
    # kernel takes, 16 to 128; neither takes one under 16 or not a power of two).
    attend = functools.partial(flash_attention, tuned=tuned)
    q, k, v = _qkv(torch_device, 1, 2, 2, 8, 8, 16)
    odd = _qkv(torch_device, 1, 2, 2, 8, 8, 24)
    cases = [
        (lambda: attend(q[0], k, v), "q must be a 4-D tensor"),
        (lambda: attend(q, k.double(), v), "k must have dtype"),
        (lambda: attend(q, k.half(), v), "one dtype"),
        (lambda: attend(q, k, v[:, :, :4]), "k and v"),
        (lambda: attend(q[..., :8], k[..., :8], v[..., :8]), "head size"),
        (lambda: attend(*odd), "head size"),
        (lambda: attend(q, k[:1, :1].expand(2, 1, 8, 16), v[:1, :1].expand(2, 1, 8, 16)), "batch"),
        (lambda: attend(q[:, :, :, :16].repeat(1, 3, 1, 1)[:, :3], k, v), "multiple"),
        (lambda: attend(q[:, :, :0], k, v), "empty"),
        (lambda: attend(q, k[:, :, :4], v[:, :, :4], causal=True), "Tq <= Tk"),
        (lambda: attend(q, k, v, causal=1), "causal"),
        (lambda: attend(q, k, v, scale=0.0), "scale"),
        (lambda: attend(q, k, v, tuned=1), "tuned must be True or False"),
        (lambda: attend(q.numpy() if torch_device == "cpu" else q.cpu(), k, v), "q must be"),
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
    def test_matches_sdpa(self, dtype, hs, causal, t, torch_device, launched):
        q, k, v = _qkv(torch_device, 2, 8, 8, t, t, hs, dtype=dtype, seed=t)
        expected = sdpa(q.float(), k.float(), v.float(), causal=causal)  # float32 truth on the GPU
        atol = 2e-2 if dtype == torch.bfloat16 else 2e-3
        torch.testing.assert_close(flash_attention(q, k, v, causal=causal).float(), expected, rtol=0, atol=atol)
        torch.testing.assert_close(flash_attention(q, k, v, causal=causal, tuned=False).float(), expected, rtol=0,
                                   atol=atol)
        torch.testing.assert_close(sdpa(q, k, v, causal=causal).float(), expected, rtol=0, atol=atol)  # same bar
        hopper = torch.cuda.get_device_capability() >= (9, 0)
        assert launched == ["tuned" if hopper else "readable", "readable"]  # no silent fallback on an H100

    @pytest.mark.parametrize("tuned", [True, False])
    def test_gqa_and_chunk(self, tuned, torch_device):
        q, k, v = _qkv(torch_device, 1, 32, 8, 512, 2048, 128, dtype=torch.bfloat16, seed=3)
        expected = sdpa(q.float(), k.float(), v.float(), causal=True)
        torch.testing.assert_close(flash_attention(q, k, v, causal=True, tuned=tuned).float(), expected, rtol=0,
                                   atol=2e-2)

    @pytest.mark.parametrize("hs", [64, 128])
    def test_every_tuned_config(self, hs, torch_device, monkeypatch):
        """Each config the autotuner may pick for bf16 (AISYS_PIN_AUTOTUNE leaves the other tests one): causal,
        bottom-right, grouped heads and ragged ends, so both key loops and the clipped tiles run in each."""
        q, k, v = _qkv(torch_device, 1, 4, 2, 700, 1000, hs, dtype=torch.bfloat16, seed=hs)
        if fa.tma_refusal(q.device, (q, k, v)):
            pytest.skip(fa.tma_refusal(q.device, (q, k, v)))
        expected = sdpa(q.float(), k.float(), v.float(), causal=True)
        kernel = fa.flash_attention_tma_kernel
        for config in fa._tma_fitting_configs(fa.TMA_GPU_CONFIGS, {"desc_q": SimpleNamespace(base=q)}, HEAD_DIM=hs):
            monkeypatch.setattr(kernel, "configs", [config])  # one config: launched as it is, no timing
            torch.testing.assert_close(flash_attention(q, k, v, causal=True).float(), expected, rtol=0, atol=2e-2,
                                       msg=lambda text, config=config: f"{config}: {text}")


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
