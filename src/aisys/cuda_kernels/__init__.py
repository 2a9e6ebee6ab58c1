"""CUDA kernels written in numba's dialect, with the host functions that launch them (run by aisys.simt or
numba-cuda)."""
