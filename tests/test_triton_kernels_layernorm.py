"""The Triton LayerNorm and RMSNorm reference: every kernel (row in registers, readable loop over blocks, tuned loop)
matches torch, and the default picks the row kernel for a row that fits one block and the tuned loop past it."""

import pytest
import torch
import torch.nn.functional as F

from aisys.triton_kernels import layernorm
from aisys.triton_kernels.layernorm import launch_config, layer_norm, rms_norm
from launches import record_launches

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (rtol, atol) against float64: a few units in the last place of float32, one of float16 and bfloat16.
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}
BLOCKS = [None, 32, 128, "tuned loop"]  # None: the default, which runs the row kernel where the row fits in one
# block; a number: the readable looping kernel; "tuned loop": the default with every row sent to the looping path,
# which is the autotuned kernel's (256 columns per step in the interpreter)


@pytest.fixture
def kw(monkeypatch):
    """The keyword arguments that select the kernel a BLOCKS entry names."""
    def select(block):
        if block == "tuned loop":  # rows of the tests' sizes fit one block: make none fit
            monkeypatch.setattr(layernorm, "MAX_FUSED_BYTES", 0)
            return {}
        return {} if block is None else {"block": block, "tuned": False}
    return select


@pytest.fixture
def launched(monkeypatch):
    """The names of the kernels launched during the test, in order."""
    names = ("layer_norm_row_kernel", "layer_norm_kernel", "layer_norm_tuned_kernel", "rms_norm_row_kernel",
             "rms_norm_kernel", "rms_norm_tuned_kernel")
    return record_launches(monkeypatch, layernorm, {name: name for name in names})


def _data(device, shape, dtype, seed=0, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    M, N = shape
    x = (offset + torch.randn(shape, generator=g)).to(dtype).to(device)
    w = (1 + 0.5 * torch.randn(N, generator=g)).to(dtype).to(device)
    b = (0.5 * torch.randn(N, generator=g)).to(dtype).to(device)
    return x, w, b


def _close(out, expected, dtype, rtol=None, atol=None):
    assert out.dtype == dtype and out.shape == expected.shape
    r, a = TOL[dtype]
    torch.testing.assert_close(out.double().cpu(), expected.cpu(), rtol=rtol or r, atol=atol or a)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 128), (4, 129), (2, 1000)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_matches_torch(block, shape, dtype, torch_device, kw):
    x, w, b = _data(torch_device, shape, dtype, seed=shape[1])
    expected = F.layer_norm(x.double(), shape[1:], w.double(), b.double(), 1e-5)
    _close(layer_norm(x, w, b, 1e-5, **kw(block)), expected, dtype)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (4, 129), (2, 1000)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_matches_torch(block, shape, dtype, torch_device, kw):
    x, w, _ = _data(torch_device, shape, dtype, seed=shape[1], offset=0.5)
    expected = F.rms_norm(x.double(), shape[1:], w.double(), 1e-6)
    _close(rms_norm(x, w, 1e-6, **kw(block)), expected, dtype)


@pytest.mark.parametrize("block", BLOCKS)
def test_two_passes_stay_precise_around_a_large_mean(block, torch_device, kw):
    x, w, b = _data(torch_device, (3, 1000), torch.float32, offset=1e4)  # E[x^2] - E[x]^2 would be noise of size ~8
    expected = F.layer_norm(x.double(), (1000,), w.double(), b.double(), 1e-5)
    _close(layer_norm(x, w, b, 1e-5, **kw(block)), expected, torch.float32, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("block", BLOCKS)
def test_constant_rows_give_the_bias(block, torch_device, kw):
    x, w, b = _data(torch_device, (2, 9), torch.float32)
    x[0], x[1] = 0.0, 3.0  # variance 0: 1 / sqrt(0 + eps) times distances of 0
    y = layer_norm(x, w, b, 1e-5, **kw(block))
    # 1e-3: on a GPU the mean of nine 3.0s is 3.0 only to an ulp, and that ulp is multiplied by 1/sqrt(eps)
    torch.testing.assert_close(y, b.expand(2, 9), rtol=0, atol=1e-3)
    assert rms_norm(torch.zeros_like(x), w, 1e-6, **kw(block)).eq(0).all()


def test_tuned_kernel_merges_blocks_of_different_means(torch_device, kw, launched):
    # Blocks of 256 columns around 0, 100 and -50: the per-block statistics merged by Chan's formula must
    # carry the spread between the blocks' means, not only the spread within each.
    x, w, b = _data(torch_device, (5, 700), torch.float32, seed=3)
    x[:, 256:512] += 100.0
    x[:, 512:] -= 50.0
    expected = F.layer_norm(x.double(), (700,), w.double(), b.double(), 1e-5)
    _close(layer_norm(x, w, b, 1e-5, **kw("tuned loop")), expected, torch.float32)
    assert launched == ["layer_norm_tuned_kernel"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_default_reads_a_fitting_row_once_and_tunes_the_loop_past_it(dtype, torch_device, launched):
    # The first row length past one block (64 KiB): the default's autotuned loop, tuned=False's readable loop.
    fits = layernorm.MAX_FUSED_BYTES // torch.tensor([], dtype=dtype).element_size()
    for n, default, readable in ((fits, "row_kernel", "row_kernel"), (fits + 1, "tuned_kernel", "kernel")):
        x, w, b = _data(torch_device, (1, n), dtype, seed=n, offset=1.0)
        expected = F.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
        expected_rms = F.rms_norm(x.double(), (n,), w.double(), 1e-6)
        launched.clear()
        _close(layer_norm(x, w, b), expected, dtype)
        _close(layer_norm(x, w, b, tuned=False), expected, dtype)
        _close(rms_norm(x, w), expected_rms, dtype)
        _close(rms_norm(x, w, tuned=False), expected_rms, dtype)
        assert launched == [f"layer_norm_{default}", f"layer_norm_{readable}", f"rms_norm_{default}",
                            f"rms_norm_{readable}"], n


def test_no_rows_launches_nothing(torch_device):
    x, w, b = _data(torch_device, (0, 7), torch.float32)
    assert layer_norm(x, w, b).shape == (0, 7) and rms_norm(x, w).shape == (0, 7)


def test_launch_config_picks_the_row_kernel_while_the_row_fits():
    assert launch_config(4096, 2) == ("row", 4096, 8)
    assert launch_config(5000, 4) == ("row", 8192, 16)
    assert launch_config(16384, 4) == ("row", 16384, 16)
    assert launch_config(32768, 2) == ("row", 32768, 32)
    assert launch_config(16385, 4) == ("loop", layernorm.LOOP_BLOCK, 8)
    assert launch_config(7, 4) == ("row", 8, 1)
    assert launch_config(7, 4, block=4) == ("loop", 4, 1)
    assert launch_config(1000, 4, block=256) == ("loop", 256, 2)


@pytest.mark.parametrize("call, message", [
    (lambda x, w, b: layer_norm(x.numpy(), w, b), "x must be a torch.Tensor"),
    (lambda x, w, b: layer_norm(x[0], w, b), "x must be a 2-D tensor"),
    (lambda x, w, b: layer_norm(x, w[:3], b), r"weight must have shape \(7,\)"),
    (lambda x, w, b: layer_norm(x, w, b.double()), "bias must have dtype float32, float16 or bfloat16"),
    (lambda x, w, b: layer_norm(x, w, b.half()), "bias must have x's dtype"),
    (lambda x, w, b: layer_norm(x, w, b, eps=-1.0), "eps must be a number >= 0"),
    (lambda x, w, b: layer_norm(x, w, b, block=6), "block must be a power of two"),
    (lambda x, w, b: layer_norm(x, w, b, tuned=1), "tuned must be True or False"),
    (lambda x, w, b: rms_norm(x, w, block=4), "block and tuned exclude each other"),
    (lambda x, w, b: layer_norm(x, w, b, block=4, tuned=True), "pass tuned=False with it"),
    (lambda x, w, b: rms_norm(x, w.reshape(1, 7)), "weight must be a 1-D tensor"),
    (lambda x, w, b: layer_norm(x[:, :0], w[:0], b[:0]), "x must have at least one column"),
])
def test_bad_arguments_are_named(call, message, torch_device):
    x, w, b = (t.cpu() for t in _data(torch_device, (2, 7), torch.float32))
    if torch_device == "cuda" and "torch.Tensor" not in message:
        x, w, b = x.cuda(), w.cuda(), b.cuda()
    with pytest.raises(ValueError, match=message):
        call(x, w, b)


@pytest.mark.gpu  # the lead's run
class TestOnGPU:
    """Rows past one block, compiled: the benchmark's 1024 x 65536 and a ragged length, through the config the
    autotuner picks (the first, where AISYS_PIN_AUTOTUNE=1) and through the readable loop, against float64."""

    @pytest.mark.parametrize("tuned", [True, False])
    @pytest.mark.parametrize("shape", [(1024, 65536), (3, 100003)])
    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
    def test_long_rows_match_torch(self, dtype, shape, tuned, torch_device, launched):
        x, w, b = _data(torch_device, shape, dtype, seed=shape[1], offset=1.0)
        _close(layer_norm(x, w, b, tuned=tuned), F.layer_norm(x.double(), shape[1:], w.double(), b.double(), 1e-5),
               dtype)
        _close(rms_norm(x, w, tuned=tuned), F.rms_norm(x.double(), shape[1:], w.double(), 1e-6), dtype)
        kind = "tuned_kernel" if tuned else "kernel"
        assert launched == [f"layer_norm_{kind}", f"rms_norm_{kind}"]
