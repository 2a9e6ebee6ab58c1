"""Data in the formats the Triton exercises take, as the bridge can carry it (numpy has no bfloat16)."""

import numpy as np
import torch

from aisys.tensors import TORCH_DTYPES


def rounded(values, dtype: str) -> np.ndarray:
    """`values` rounded to `dtype`, as float32 (bf16 values travel in float32)."""
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(TORCH_DTYPES[dtype]).float().numpy()


def as_sent(values, dtype: str) -> np.ndarray:
    """`values` as the student receives them: a float16 array for fp16, else float32 holding `dtype`'s values."""
    return np.asarray(values).astype(np.float16) if dtype == "fp16" else rounded(values, dtype)
