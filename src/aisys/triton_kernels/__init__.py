"""Kernels written in Triton, with host functions taking and returning torch tensors (its interpreter on a CPU)."""

from aisys import device

# The interpreter is chosen when triton is imported: before any module of this package imports it.
device.use_triton_interpreter()
