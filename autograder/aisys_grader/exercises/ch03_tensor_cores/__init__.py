"""Checks of chapter 3: Tensor Cores, GEMM and systolic arrays."""
