# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 1.1: the roofline model
#
# **You will learn** to count the work (FLOPs) and the memory traffic (bytes) of the
# operations a neural network spends its time in, to compute their arithmetic intensity,
# and to tell from a chip's roofline whether each one is limited by compute or by memory.
#
# A kernel that performs $F$ floating-point operations and moves $B$ bytes between the chip
# and its main memory has **arithmetic intensity** $I = F / B$ (FLOP/byte). On a chip with
# peak compute $P$ (FLOP/s) and memory bandwidth $W$ (bytes/s), it cannot run faster than
#
# $$\text{attainable}(I) = \min(P,\; W \cdot I).$$
#
# Count the *minimum* traffic: each input read once from main memory, each output written
# once, as a kernel that keeps its working set on chip would. A multiply-add is **two**
# FLOPs, as in every datasheet.
#
# In each function, replace `raise NotImplementedError()` with your code, then run the
# check cell below it. The checks you see use a few fixed cases; when your work is graded,
# hidden checks run the same functions on many more shapes and number formats. Write the
# functions yourself: when grading, `aisys.roofline`, `aisys.dtypes` and `aisys.hardware`
# (the reference answers) cannot be imported.

# %%
from aisys_grader import checker

check = checker("01-architecture/roofline", globals())


# %% [markdown]
# ## 1. Bytes per element
#
# Sizes in memory: `fp64` 8 bytes, `fp32` 4, `tf32` 4 (a Tensor Core compute format that is
# stored in 32-bit registers), `fp16` and `bf16` 2, `fp8_e4m3` and `fp8_e5m2` 1, `int32` 4,
# `int8` 1, and `int4` half a byte: two values share one byte.

# %% tags=["solution"]
def bytes_per_element(dtype: str) -> float:
    """Bytes one element of `dtype` occupies in memory (0.5 for int4)."""
    ### BEGIN SOLUTION
    bits = {"fp64": 64, "fp32": 32, "tf32": 32, "fp16": 16, "bf16": 16, "fp8_e4m3": 8, "fp8_e5m2": 8,
            "int32": 32, "int8": 8, "int4": 4}
    return bits[dtype] / 8
    ### END SOLUTION


# %% tags=["check"]
check("bytes_per_element")
### BEGIN HIDDEN TESTS
check("bytes_per_element", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Matrix multiply
#
# $C = A B$ with $A$ of shape $M \times K$ and $B$ of shape $K \times N$: each of the $MN$
# outputs is a dot product of length $K$, that is $K$ multiply-adds. A GEMV (matrix times
# vector) is the same operation with $N = 1$.
#
# Return a dict `{"flops": ..., "bytes": ...}`: $A$ and $B$ read once, $C$ written once.

# %% tags=["solution"]
def gemm_cost(M: int, N: int, K: int, dtype: str) -> dict:
    """FLOPs and minimum bytes moved by C (M x N) = A (M x K) @ B (K x N)."""
    ### BEGIN SOLUTION
    return {"flops": 2 * M * N * K, "bytes": (M * K + K * N + M * N) * bytes_per_element(dtype)}
    ### END SOLUTION


# %% tags=["check"]
check("gemm_cost")
### BEGIN HIDDEN TESTS
check("gemm_cost", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Elementwise operations
#
# An elementwise operation reads `inputs` arrays of `n` elements, writes `outputs` arrays of
# `n` elements, and does `flops_per_element` FLOPs per element. Vector addition
# `z = x + y` has `inputs=2, outputs=1, flops_per_element=1`.

# %% tags=["solution"]
def elementwise_cost(n: int, dtype: str, inputs: int, outputs: int, flops_per_element: int) -> dict:
    """FLOPs and minimum bytes moved by an elementwise operation over n elements."""
    ### BEGIN SOLUTION
    return {"flops": n * flops_per_element, "bytes": n * (inputs + outputs) * bytes_per_element(dtype)}
    ### END SOLUTION


# %% tags=["check"]
check("elementwise_cost")
### BEGIN HIDDEN TESTS
check("elementwise_cost", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Softmax
#
# A row-wise softmax of a `rows x cols` matrix, $y_{ij} = e^{x_{ij} - m_i} / \sum_k e^{x_{ik} - m_i}$
# with $m_i = \max_k x_{ik}$. Count **5 FLOPs per element** (max, subtract, exp, sum, divide),
# and the traffic of a fused kernel: the input read once, the output written once.

# %% tags=["solution"]
def softmax_cost(rows: int, cols: int, dtype: str) -> dict:
    """FLOPs and minimum bytes moved by a fused row-wise softmax."""
    ### BEGIN SOLUTION
    n = rows * cols
    return {"flops": 5 * n, "bytes": 2 * n * bytes_per_element(dtype)}
    ### END SOLUTION


# %% tags=["check"]
check("softmax_cost")
### BEGIN HIDDEN TESTS
check("softmax_cost", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. The roofline
#
# `attainable_flops` is the roofline itself. `bound` says which roof limits a kernel:
# `"memory"` when its intensity is below the **ridge point** $P / W$, `"compute"` from the
# ridge point on. An intensity of 0 (no FLOPs) attains nothing; an infinite one (no
# traffic) attains the peak.

# %% tags=["solution"]
def attainable_flops(peak_flops: float, bandwidth: float, intensity: float) -> float:
    """The highest FLOP/s a kernel of this arithmetic intensity can reach on this chip."""
    ### BEGIN SOLUTION
    return min(peak_flops, bandwidth * intensity)
    ### END SOLUTION


def bound(peak_flops: float, bandwidth: float, intensity: float) -> str:
    """'memory' if the kernel is limited by memory bandwidth, else 'compute'."""
    ### BEGIN SOLUTION
    return "memory" if intensity < peak_flops / bandwidth else "compute"
    ### END SOLUTION


# %% tags=["check"]
check("attainable_flops")
### BEGIN HIDDEN TESTS
check("attainable_flops", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("bound")
### BEGIN HIDDEN TESTS
check("bound", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Where do real operations land?
#
# With your functions, the table below places a few operations of a transformer on an
# NVIDIA H100 SXM5 (989.4 TFLOP/s dense bf16, 3.35 TB/s HBM3). Before you run it, guess
# which are memory-bound; then change the shapes (a batch of 1 against 64 in the GEMM, say)
# and watch the intensity move.

# %%
peak, bandwidth = 989.4e12, 3.35e12
operations = {
    "GEMM 8192^3, bf16": gemm_cost(8192, 8192, 8192, "bf16"),
    "GEMV 8192 x 8192, bf16 (decode, batch 1)": gemm_cost(8192, 1, 8192, "bf16"),
    "vector add, 2^26 fp32": elementwise_cost(2**26, "fp32", 2, 1, 1),
    "softmax 4096 x 4096, fp16": softmax_cost(4096, 4096, "fp16"),
}
for name, cost in operations.items():
    intensity = cost["flops"] / cost["bytes"]
    tflops = attainable_flops(peak, bandwidth, intensity) / 1e12
    print(f"{name:42} {intensity:8.1f} FLOP/B {tflops:7.1f} TFLOP/s  {bound(peak, bandwidth, intensity)}-bound")
