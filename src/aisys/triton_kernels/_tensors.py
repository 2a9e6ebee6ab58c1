"""Checks of the tensors Triton host functions take: kind, shape, dtype and device, each error naming the argument."""

import os

import torch

from aisys.tensors import TORCH_DTYPES

FLOAT_DTYPES = tuple(TORCH_DTYPES.values())  # float32, float16, bfloat16: computed in float32 inside the kernels


def interpreted() -> bool:
    """Whether Triton runs in its interpreter (CPU tensors) rather than compiled for the GPU (CUDA tensors)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def dot_precision(dtype: torch.dtype) -> str | None:
    """tl.dot's input_precision for inputs of `dtype`: "ieee" for float32, whose default on a GPU is TF32 (a 10-bit
    mantissa: errors near 1e-3), so that a float32 kernel can be checked as tightly as on a CPU; else the default.
    A constexpr argument of the kernel: Triton 3.6 ignores `default_dot_input_precision` given at launch."""
    return "ieee" if dtype == torch.float32 else None


def float_tensor(name: str, x, ndim: int) -> torch.Tensor:
    """`x` as a contiguous tensor: a float32, float16 or bfloat16 torch.Tensor of `ndim` dimensions on the device
    Triton runs on here; ValueError naming `name` otherwise."""
    tensor_on_triton_device(name, x)
    if x.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D tensor, got shape {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must have dtype float32, float16 or bfloat16, got {x.dtype}")
    return x.contiguous()


def tensor_on_triton_device(name: str, x) -> None:
    """ValueError naming `name` unless x is a torch.Tensor on the device Triton runs on here (the CPU in the
    interpreter, else the GPU)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    wanted = "cpu" if interpreted() else "cuda"
    if x.device.type != wanted:
        mode = "in its interpreter" if wanted == "cpu" else "compiled for the GPU"
        raise ValueError(f"{name} must be on {wanted}, where Triton runs here ({mode}); got a tensor on {x.device}")
