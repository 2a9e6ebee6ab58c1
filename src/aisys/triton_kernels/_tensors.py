"""Checks of the tensors Triton host functions take: kind, shape, dtype and device, each error naming the argument."""

import os

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # computed in float32 inside the kernels


def interpreted() -> bool:
    """Whether Triton runs in its interpreter (CPU tensors) rather than compiled for the GPU (CUDA tensors)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def float_tensor(name: str, x, ndim: int) -> torch.Tensor:
    """`x` as a contiguous tensor: a float32, float16 or bfloat16 torch.Tensor of `ndim` dimensions on the device
    Triton runs on here; ValueError naming `name` otherwise."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D tensor, got shape {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must have dtype float32, float16 or bfloat16, got {x.dtype}")
    wanted = "cpu" if interpreted() else "cuda"
    if x.device.type != wanted:
        mode = "in its interpreter" if wanted == "cpu" else "compiled for the GPU"
        raise ValueError(f"{name} must be on {wanted}, where Triton runs here ({mode}); got a tensor on {x.device}")
    return x.contiguous()
