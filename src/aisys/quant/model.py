"""The real model chapter 8 measures every method on: a small character-level transformer trained on this book.

Chapter 7's architecture (`aisys.inference.model.ModelConfig`: RMSNorm, rotary embeddings, grouped-query
attention, a SwiGLU MLP), in torch, with trained weights: it reads the book's own markdown (every
`book/**/*.md` outside `_build` and `node_modules`, in sorted path order, one newline between files) as UTF-8
bytes, so the vocabulary is the 256 byte values and nothing is downloaded. The bytes split into training (the
first 85%), calibration (the next 5%) and validation (the last 10%) data. Training is seeded and runs on one
thread with deterministic algorithms, so a build gets the same weights every time for the same book text on the
same kind of CPU (torch's kernels may round differently on another instruction set). The corpus includes chapter
8's own pages: editing any page changes the model a little, and the measured numbers with it.

`measure_methods(model, methods)` is the chapter's measurement: for every linear layer of the blocks (the
embedding and the output layer stay in float32, as most deployments leave them), it collects the layer's inputs
on the calibration data, replaces the weight by what the method makes of it, optionally quantizes the layer's
input at evaluation, and reports the validation perplexity, the weights' bytes in the method's format and the
worst layer's relative output error. A method is a `Method`: a weight function `(weight (out, in), inputs
(tokens, in)) -> weight`, both float32 torch tensors, the result the dequantized weight, plus optionally an
activation quantizer and a `prepare` step that changes the model first (QAT fine-tunes it; SmoothQuant folds
its scales into the norms).
"""

import contextlib
import functools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..inference.model import ModelConfig
from . import affine, qat

CONFIG = ModelConfig("book-char", vocab_size=256, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=352,
                     max_seq_len=128)
SEED = 0
STEPS = 250  # AdamW steps of TRAINING_BATCH sequences of max_seq_len bytes
TRAINING_BATCH = 16
LEARNING_RATE = 3e-3
EVAL_SEQUENCES = 64  # validation windows of max_seq_len bytes the perplexity averages over
CALIBRATION_SEQUENCES = 8
SPLITS = (0.85, 0.05, 0.10)  # training, calibration, validation
BOOK = Path(__file__).resolve().parents[3] / "book"


# ---------------------------------------------------------------------------------------------------------------
# The corpus


def book_files(root: Path = BOOK) -> list[Path]:
    """The book's markdown files in sorted order, without build output and installed packages."""
    skipped = {"_build", "node_modules", "exercises"}
    files = sorted(p for p in Path(root).rglob("*.md") if not skipped & set(p.relative_to(root).parts))
    if not files:
        raise FileNotFoundError(f"no markdown files under {root}: the corpus is the book's own text")
    return files


@functools.cache
def corpus(root: Path = BOOK) -> dict:
    """The book's bytes as int64 tensors: {"train", "calibration", "validation"}."""
    data = b"\n".join(p.read_bytes() for p in book_files(root))
    ids = torch.tensor(np.frombuffer(data, dtype=np.uint8).astype(np.int64))
    a, b = int(len(ids) * SPLITS[0]), int(len(ids) * (SPLITS[0] + SPLITS[1]))
    return {"train": ids[:a], "calibration": ids[a:b], "validation": ids[b:]}


def windows(ids: torch.Tensor, count: int, length: int) -> torch.Tensor:
    """`count` consecutive non-overlapping windows of `length + 1` ids (inputs and next-byte targets)."""
    count = min(count, (len(ids) - 1) // length)
    return torch.stack([ids[i * length: i * length + length + 1] for i in range(count)])


# ---------------------------------------------------------------------------------------------------------------
# The model


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(size)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding of x (B, heads, T, hs) at positions 0..T-1, interleaved pairs as aisys.inference.model."""
    hs, t = x.shape[-1], x.shape[-2]
    frequencies = theta ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    angles = torch.arange(t, dtype=torch.float64)[:, None] * frequencies
    cos, sin = angles.cos().float(), angles.sin().float()
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        kv = cfg.n_kv_heads * cfg.head_dim
        self.cfg = cfg
        self.attention_norm, self.mlp_norm = RMSNorm(cfg.d_model), RMSNorm(cfg.d_model)
        self.wq, self.wk = nn.Linear(cfg.d_model, cfg.d_model, bias=False), nn.Linear(cfg.d_model, kv, bias=False)
        self.wv, self.wo = nn.Linear(cfg.d_model, kv, bias=False), nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.w_gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.w_up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.w_down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        cfg, (b, t, _) = self.cfg, x.shape
        h = self.attention_norm(x)
        q = self.wq(h).view(b, t, cfg.n_heads, cfg.head_dim).transpose(1, 2)
        k = self.wk(h).view(b, t, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, t, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = rope(q, cfg.rope_theta), rope(k, cfg.rope_theta)
        group = cfg.n_heads // cfg.n_kv_heads  # each kv head serves this many query heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(attended.transpose(1, 2).reshape(b, t, cfg.d_model))
        h = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class CharTransformer(nn.Module):
    """A decoder-only transformer over bytes with `ModelConfig`'s shape; forward(ids (B, T)) -> logits (B, T, V)."""

    def __init__(self, cfg: ModelConfig = CONFIG):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.final_norm = RMSNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, ids):
        x = self.embedding(ids)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.final_norm(x))

    def linears(self) -> dict[str, nn.Linear]:
        """The blocks' linear layers by name ("blocks.0.wq", ...): what every method quantizes."""
        return {name: m for name, m in self.named_modules() if isinstance(m, nn.Linear) and name.startswith("blocks")}


one_thread = qat.one_thread


def train(steps: int = STEPS, seed: int = SEED, *, model: CharTransformer | None = None, lr: float = LEARNING_RATE,
          weight_transform: Callable | None = None) -> CharTransformer:
    """Train (or fine-tune `model`) with AdamW on random training windows, the learning rate decaying linearly to 0.

    `weight_transform(weight)`, if given, is applied to every block linear's weight in the forward pass (QAT's
    fake quantization), through a parametrization-free swap of the weight for the step.
    """
    data = corpus()["train"]
    with one_thread():
        torch.manual_seed(seed)
        model = model if model is not None else CharTransformer()
        g = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
        t = CONFIG.max_seq_len
        for _ in range(steps):
            starts = torch.randint(0, len(data) - t - 1, (TRAINING_BATCH,), generator=g)
            batch = torch.stack([data[s: s + t + 1] for s in starts.tolist()])
            with _transformed(model, weight_transform):
                logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, CONFIG.vocab_size), batch[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    return model.eval()


@contextlib.contextmanager
def _transformed(model: CharTransformer, transform: Callable | None):
    """Each block linear computes with transform(weight) (gradients flow back to the weight) for the duration."""
    if transform is None:
        yield
        return
    handles = []
    for linear in model.linears().values():
        def pre(module, args, transform=transform):
            module._saved = module.weight
            del module.weight
            module.weight = transform(module._saved)

        def post(module, args, output):
            del module.weight
            module.weight = module._saved
            del module._saved

        handles += [linear.register_forward_pre_hook(pre), linear.register_forward_hook(post)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@functools.cache
def _trained_state() -> tuple[dict, float]:
    start = time.process_time()
    model = train()
    return {k: v.clone() for k, v in model.state_dict().items()}, time.process_time() - start


def trained_model() -> CharTransformer:
    """A fresh copy of the trained model (trained once per process, then cached)."""
    state, _ = _trained_state()
    model = CharTransformer()
    model.load_state_dict(state)
    return model.eval()


def training_seconds() -> float:
    """The CPU time training took in this process (one thread)."""
    return _trained_state()[1]


# ---------------------------------------------------------------------------------------------------------------
# Perplexity


def perplexity(model: CharTransformer, split: str = "validation", sequences: int = EVAL_SEQUENCES) -> float:
    """exp(mean cross-entropy) of next-byte prediction over `sequences` windows of the split."""
    batch = windows(corpus()[split], sequences, CONFIG.max_seq_len)
    with one_thread(), torch.no_grad():
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, CONFIG.vocab_size), batch[:, 1:].reshape(-1))
    return math.exp(float(loss))


def unigram_perplexity(split: str = "validation", sequences: int = EVAL_SEQUENCES) -> float:
    """The perplexity of byte frequencies counted on the training split (add-one smoothing), on the same targets."""
    counts = torch.bincount(corpus()["train"], minlength=CONFIG.vocab_size).double() + 1
    log_p = (counts / counts.sum()).log()
    targets = windows(corpus()[split], sequences, CONFIG.max_seq_len)[:, 1:].reshape(-1)
    return math.exp(-float(log_p[targets].mean()))


# ---------------------------------------------------------------------------------------------------------------
# Methods


@dataclass(frozen=True)
class Method:
    """One row of the table.

    weight      (weight (out, in), inputs (tokens, in)) -> the weight the layer computes with (dequantized),
                float32 torch tensors; None keeps the weight
    bits        bits(shape (out, in)) -> the weight's bytes in the method's format, scales and zero points included
    activation  x (..., in) -> x as the layer sees it at evaluation (e.g. fake-quantized per token); None: as is
    prepare     prepare(model, inputs by layer name) -> a model to quantize instead (fine-tuned, smoothed)
    """

    name: str
    bytes: Callable[[tuple[int, int]], float]
    weight: Callable | None = None
    activation: Callable | None = None
    prepare: Callable | None = None
    note: str = field(default="")


SCALE_BITS = 16  # a scale stored as fp16, as GPTQ's and AWQ's packed formats store them


def quantized_bytes(bits: int, group: int | None = None, zero_point: bool = False) -> Callable:
    """Bytes of a weight (out, in) at `bits` per element, plus one fp16 scale (and a `bits` zero point if
    asymmetric) per output channel, or per `group` inputs of it."""
    def count(shape):
        out, inp = shape
        blocks = out * (inp // group if group else 1)
        return (out * inp * bits + blocks * (SCALE_BITS + (bits if zero_point else 0))) / 8
    return count


def per_tensor_bytes(bits: int) -> Callable:
    return lambda shape: (shape[0] * shape[1] * bits + 32) / 8  # one float32 scale for the tensor


def rtn(bits: int, granularity: str = "channel", group_size: int | None = None) -> Callable:
    """Round-to-nearest symmetric quantization of the weight with aisys.quant.affine (inputs unused)."""
    def weight(w, inputs):
        return torch.from_numpy(affine.fake_quantize(w.detach().numpy(), bits=bits, granularity=granularity,
                                                     group_size=group_size))
    return weight


def activation_int8(granularity: str) -> Callable:
    """Dynamic symmetric int8 quantization of a layer's input per tensor or per token, at every call."""
    def quantize(x):
        flat = x.detach().reshape(-1, x.shape[-1]).numpy()
        return torch.from_numpy(affine.fake_quantize(flat, bits=8, granularity=granularity)).reshape(x.shape)
    return quantize


E4M3_MAX = float(torch.finfo(torch.float8_e4m3fn).max)  # 448


def fp8_e4m3(x: torch.Tensor) -> torch.Tensor:
    """x scaled so that max|x| is E4M3's largest value, clamped (saturation: E4M3 has no infinity, and torch's
    cast of a larger value gives NaN), cast to float8_e4m3fn (round to nearest even) and scaled back."""
    scale = (x.detach().abs().amax().double() / E4M3_MAX).float().clamp_min(affine.SMALLEST_SCALE)
    return (x.detach() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float() * scale


def prune_2_4(w, inputs):
    """Keep the 2 largest |w| of every 4 consecutive inputs (aisys.sparsity's magnitude rule)."""
    from .. import sparsity
    return torch.from_numpy(sparsity.prune_2_4(w.detach().numpy()).astype(np.float32))


def _sparse_bytes(shape):
    from .. import sparsity
    return sparsity.compressed_bytes(shape[0], shape[1], "fp32")


QAT_STEPS = 40
QAT_LR = 3e-4


def qat_prepare(bits: int | None = 4, steps: int = QAT_STEPS, lr: float = QAT_LR) -> Callable:
    """Fine-tune a copy of the model with every block weight fake-quantized (per channel, symmetric, STE);
    bits None fine-tunes the same steps without fake quantization (QAT's control: what extra training alone does)."""
    def prepare(model, inputs):
        tuned = CharTransformer()
        tuned.load_state_dict(model.state_dict())
        transform = None if bits is None else (lambda w: qat.fake_quantize_weight(w, bits, "channel"))
        return train(steps, SEED + 1, model=tuned.train(), lr=lr, weight_transform=transform)
    return prepare


def fold_smoothing(scales: Callable) -> Callable:
    """A `prepare` for SmoothQuant: for each RMSNorm and the linears reading it (attention_norm: wq, wk, wv;
    mlp_norm: w_gate, w_up), s = scales(weights stacked (out, in), inputs (tokens, in)) per input channel;
    the norm's gain is divided by s and each weight's columns multiplied by it, so the model computes the same
    function with inputs easier to quantize (Xiao et al. 2023, section 4)."""
    def prepare(model, inputs):
        smoothed = CharTransformer()
        smoothed.load_state_dict(model.state_dict())
        with torch.no_grad():
            for i, block in enumerate(smoothed.blocks):
                for norm, names in ((block.attention_norm, ("wq", "wk", "wv")), (block.mlp_norm, ("w_gate", "w_up"))):
                    linears = [getattr(block, n) for n in names]
                    s = torch.as_tensor(scales(torch.cat([m.weight for m in linears]),
                                               inputs[f"blocks.{i}.{names[0]}"]), dtype=torch.float32)
                    norm.weight /= s
                    for m in linears:
                        m.weight *= s
        return smoothed.eval()
    return prepare


def standard_methods() -> list[Method]:
    """The rows this module implements (GPTQ, AWQ and SmoothQuant join them from their own modules)."""
    return [
        Method("FP32 (baseline)", lambda s: s[0] * s[1] * 4),
        Method("W8A8 per tensor", per_tensor_bytes(8), rtn(8, "tensor"), activation_int8("tensor")),
        Method("W8A8 per channel / per token", quantized_bytes(8), rtn(8, "channel"), activation_int8("token")),
        Method("FP8 E4M3 W+A per tensor", per_tensor_bytes(8), lambda w, x: fp8_e4m3(w), fp8_e4m3),
        Method("W4 per channel RTN", quantized_bytes(4), rtn(4, "channel")),
        Method("W4 g32 RTN", quantized_bytes(4, 32), rtn(4, "group", 32)),
        Method("W3 g32 RTN", quantized_bytes(3, 32), rtn(3, "group", 32)),
        Method("2:4 magnitude pruning", _sparse_bytes, prune_2_4),
        Method("FP32 fine-tuned (QAT's control)", lambda s: s[0] * s[1] * 4, prepare=qat_prepare(None)),
        Method("QAT W4 per channel", quantized_bytes(4), rtn(4, "channel"), prepare=qat_prepare(4)),
    ]


def from_numpy(function: Callable, **arguments) -> Callable:
    """A weight function from one on numpy arrays, function(weight, inputs, **arguments) -> weight, such as
    gptq.gptq_quantize(weight, inputs, bits, group_size) or awq.awq_quantize(weight, inputs, bits, group_size)."""
    def weight(w, inputs):
        out = function(w.detach().numpy(), inputs.detach().numpy(), **arguments)
        return torch.as_tensor(np.asarray(out, dtype=np.float32))
    return weight


def other_methods() -> list[Method]:
    """The GPTQ, AWQ and SmoothQuant rows, from the chapter's references of those methods."""
    from . import awq, gptq, smoothquant

    def smoothing(weights, inputs):  # SmoothQuant's scales with the paper's default migration strength
        return smoothquant.smoothing_scales(smoothquant.act_max(inputs.numpy()), [weights.numpy()], alpha=0.5)

    return [
        Method("GPTQ W4 g32", quantized_bytes(4, 32),
               from_numpy(lambda w, x, **kw: gptq.gptq_quantize(w, x, **kw).weight, bits=4, group_size=32)),
        Method("AWQ W4 g32", quantized_bytes(4, 32), from_numpy(awq.awq_quantize, bits=4, group_size=32)),
        Method("SmoothQuant W8A8 per tensor", per_tensor_bytes(8), rtn(8, "tensor"), activation_int8("tensor"),
               prepare=fold_smoothing(smoothing)),
    ]


def outlier_ratio(inputs: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per layer, the largest input channel's max |x| over the median channel's: LLM.int8's outlier features
    (a few channels of magnitude far above the rest, in every token) show up as ratios far above 1."""
    ratios = {}
    for name, x in inputs.items():
        peaks = x.abs().amax(dim=0)
        ratios[name] = float(peaks.max() / peaks.median())
    return ratios


# ---------------------------------------------------------------------------------------------------------------
# The measurement


def calibration_inputs(model: CharTransformer, sequences: int = CALIBRATION_SEQUENCES) -> dict[str, torch.Tensor]:
    """Every block linear's inputs (tokens, in) on the calibration split, collected with forward hooks."""
    collected, handles = {}, []
    for name, linear in model.linears().items():
        def hook(module, args, name=name):
            collected[name] = args[0].detach().reshape(-1, args[0].shape[-1]).clone()
        handles.append(linear.register_forward_pre_hook(hook))
    batch = windows(corpus()["calibration"], sequences, CONFIG.max_seq_len)
    try:
        with one_thread(), torch.no_grad():
            model(batch[:, :-1])
    finally:
        for handle in handles:
            handle.remove()
    return collected


def measure(model: CharTransformer, method: Method, inputs: dict | None = None) -> dict:
    """One row: {"method", "perplexity", "bytes", "worst_error", "worst_layer", "seconds"} for `method`.

    The error of a layer is ||X W^T - X' W'^T|| / ||X W^T|| on the calibration inputs: X, W the float model's,
    W' the method's weight and X' the input the method's model gives the layer (quantized if the method
    quantizes activations; after `prepare`, collected again from the prepared model, so SmoothQuant's X / s).
    """
    start = time.process_time()
    inputs = calibration_inputs(model) if inputs is None else inputs
    prepared = model if method.prepare is None else method.prepare(model, inputs)
    seen = inputs if method.prepare is None else calibration_inputs(prepared)
    quantized = CharTransformer()
    quantized.load_state_dict(prepared.state_dict())
    errors, total_bytes = {}, 0.0
    with one_thread(), torch.no_grad():
        for name, linear in quantized.linears().items():
            if method.weight is not None:
                linear.weight.copy_(method.weight(linear.weight.detach().clone(), seen[name].clone()))
            x = method.activation(seen[name]) if method.activation else seen[name]
            exact = inputs[name] @ model.get_submodule(name).weight.T
            errors[name] = float((exact - x @ linear.weight.T).norm() / exact.norm())
            total_bytes += method.bytes(tuple(linear.weight.shape))
    handles = []
    if method.activation is not None:
        for linear in quantized.linears().values():
            handles.append(linear.register_forward_pre_hook(lambda m, args: (method.activation(args[0]),)))
    try:
        ppl = perplexity(quantized)
    finally:
        for handle in handles:
            handle.remove()
    worst = max(errors, key=errors.get)
    return {"method": method.name, "perplexity": ppl, "bytes": total_bytes, "worst_error": errors[worst],
            "worst_layer": worst, "seconds": time.process_time() - start}


def measure_methods(model: CharTransformer, methods: list[Method]) -> list[dict]:
    """One row per method (see `measure`), all from the same calibration inputs."""
    inputs = calibration_inputs(model)
    return [measure(model, method, inputs) for method in methods]
