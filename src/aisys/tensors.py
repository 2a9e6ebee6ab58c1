"""Numpy data to torch tensors on the device aisys runs on and back, by the format names the exercises use.

Exercises pass numpy arrays and a format name, "fp32", "fp16" or "bf16". Numpy has no bfloat16, so bf16 data
travels as float32 arrays holding bf16 values. Notebooks import these helpers, also when graded; where Triton runs in
its interpreter, importing them bounds-checks its loads and stores (aisys.triton_interpreter).

The speed checks (aisys_grader.speed) call a notebook's numpy functions with tensors already on the device:
`to_device` then uses them as they are, and within `results_on_device` `to_numpy` leaves its tensor there, so
that what is timed is the kernel, not copies between host and device.
"""

import contextlib

import numpy as np
import torch

from . import device, triton_interpreter
from ._validate import one_of

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

triton_interpreter.install()  # an unmasked load or store is an error naming the kernel's line, not corrupt memory


def to_device(x, dtype: str) -> torch.Tensor:
    """The numpy array x as a contiguous tensor of `dtype` ("fp32", "fp16" or "bf16") on aisys's device.

    The tensor is the start of a longer buffer whose tail holds the dtype's largest number: on a GPU a load
    past the end (a missing mask) puts that number in the result instead of going unnoticed. In Triton's
    interpreter the load is an error (aisys.triton_interpreter). A tensor already on that device in that dtype is
    used as it is."""
    triton_interpreter.install()  # in case TRITON_INTERPRET was set after this module was imported
    wanted = TORCH_DTYPES[one_of("dtype", dtype, tuple(TORCH_DTYPES))]
    if isinstance(x, torch.Tensor) and x.dtype == wanted and x.device.type == device.current():
        return x
    values = torch.from_numpy(np.ascontiguousarray(x)).to(wanted)
    where = device.current()
    buffer = torch.full((2 * values.numel() + 1024,), torch.finfo(values.dtype).max, dtype=values.dtype,
                        device=where)
    buffer[:values.numel()] = values.reshape(-1).to(where)
    return buffer[:values.numel()].view(values.shape)


_kept = [False]  # within results_on_device


@contextlib.contextmanager
def results_on_device():
    """Within it, `to_numpy` returns its tensor as it is, on the device (what a speed check times)."""
    before, _kept[0] = _kept[0], True
    try:
        yield
    finally:
        _kept[0] = before


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor as a numpy array on the host, in its dtype (bfloat16, which numpy lacks, as float32: exact);
    within `results_on_device`, the tensor itself."""
    if _kept[0]:
        return t
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
