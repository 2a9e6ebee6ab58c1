# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: RMSNorm in torch, in every dtype
#
# **You will learn** to write RMSNorm (Zhang & Sennrich, *Root Mean Square Layer Normalization*, 2019), the
# normalisation of Llama and most recent LLMs, `y = x / sqrt(mean(x^2) + eps) * weight`, so that it is right
# in float16 and bfloat16 as well as float32. The trap is float16: its largest number is 65504, so the
# square of any element above 256 is `inf`, and a row of such elements normalises to zeros. Meta's Llama
# reference (`llama/model.py`, `RMSNorm.forward`) therefore normalises `x.float()` and casts the result back:
# `self._norm(x.float()).type_as(x) * self.weight`.
#
# **The conventions, all of them:**
# - `rms_norm(x, weight, eps)` takes torch tensors on one device: `x` of shape `(..., N)` (any leading axes,
#   possibly no rows, `N >= 1`) and dtype float32, float16 or bfloat16; `weight` of shape `(N,)` **in `x`'s
#   dtype**; `eps` a number `> 0` (`1e-6` by default);
# - over the last axis, as Llama does: convert `x` to float32, compute `x / sqrt(mean(x^2) + eps)` there
#   (eps inside the square root; no mean is subtracted), cast that to **`x`'s dtype**, then multiply by
#   `weight` (the product stays in `x`'s dtype). Multiplying by the weight in float32 too and casting once
#   at the end is just as good: the tolerance below accepts both;
# - the result is a tensor of **`x`'s dtype and shape**: a float32 result for a float16 input is wrong;
# - edge cases: a row of zeros gives zeros (`0 / sqrt(eps)`); rows of tiny values (about `1e-4`, whose
#   `mean(x^2)` is below `eps`) are graded, and so are float16 rows whose squares overflow float16;
# - the checks call `rms_norm_arrays(x, weight, eps, dtype)`, given below your function: it carries numpy
#   arrays to tensors of `dtype` (`"fp32"`, `"fp16"` or `"bf16"`; numpy has no bfloat16, so bf16 values
#   travel in float32 arrays) with `aisys.tensors`, and your result back. Leave it as it is;
# - results are compared with RMSNorm computed in float64 from the same values, within the tolerance of
#   `x`'s dtype (as `torch.testing.assert_close` uses): relative 1.3e-6 for float32, 1e-3 for float16,
#   1.6e-2 for bfloat16, and absolute 1e-5.

# %%
import torch

from aisys.tensors import TORCH_DTYPES, to_device, to_numpy  # numpy arrays to torch tensors and back
from aisys_grader import checker

check = checker("09-drills/rmsnorm", globals())

# %% tags=["solution"]
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm of x over its last axis, computed in float32 and returned in x's dtype (as Llama's RMSNorm)."""
    ### BEGIN SOLUTION
    x32 = x.float()  # float16's squares overflow above 256: square in float32
    normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return normed.type_as(x) * weight
    ### END SOLUTION


def rms_norm_arrays(x, weight, eps, dtype):
    """What the checks call: numpy arrays holding values of `dtype` in, rms_norm's result out as numpy."""
    assert dtype in TORCH_DTYPES, dtype
    return to_numpy(rms_norm(to_device(x, dtype), to_device(weight, dtype), eps))


# %% tags=["check"]
check("rms_norm_rows")
### BEGIN HIDDEN TESTS
check("rms_norm_rows", hidden=True)
### END HIDDEN TESTS
