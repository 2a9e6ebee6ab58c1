# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: 2:4 structured sparsity, packed and multiplied
#
# **You will learn** to prune a weight matrix to the 2:4 pattern that NVIDIA's sparse Tensor
# Cores accelerate, to store it compressed as half the values plus 2-bit position indices
# packed bit for bit, to multiply it by a dense matrix from that compressed form alone, as the
# hardware does, and to count the memory it saves.
#
# A weight matrix $A$ of shape $M \times K$ is **2:4 sparse** when each group of 4
# consecutive elements of a row (columns $4g, \dots, 4g+3$, along $K$) holds at most 2
# non-zeros. Ampere and Hopper GPUs multiply such a matrix, stored compressed, at twice the
# dense math rate: the H100 SXM5 datasheet gives 1979 TFLOP/s "with sparsity" for BF16
# against 989.4 dense (Mishra et al., *Accelerating Sparse Deep Neural Networks*, 2021).
#
# Write everything with numpy; $K$ is always a multiple of 4. When grading, hidden checks
# run many more shapes and dtypes (float32, float16, float64, int8, int32), and
# `aisys.sparsity` (the reference) cannot be imported.

# %%
import numpy as np
from aisys_grader import checker

check = checker("03-tensor-cores/sparsity", globals())

# %% [markdown]
# ## 1. Magnitude pruning to 2:4
#
# Keep, in every group of 4 along a row, the 2 elements of largest **magnitude** $|w|$ and
# set the other 2 to zero: a weight of $-5$ matters more than one of $3$. When magnitudes tie,
# the **lower position wins**: in $[2, -2, 2, 1]$ keep positions 0 and 1. An all-zero group
# keeps positions 0 and 1.
#
# `mask_2_4(W)` returns a boolean array of W's shape, True where an element is kept (exactly
# 2 per group); `prune_2_4(W)` returns W with the others set to 0, in W's dtype.
#
# Two numpy traps: `np.abs` of an `int8` $-128$ is $-128$ (it wraps around), so take
# magnitudes in a wider type (`W.astype(np.int64)` or `np.float64`); and `np.argsort`'s default
# algorithm is not stable, so pass `kind="stable"` when the order of ties matters.

# %% tags=["solution"]
def mask_2_4(W: np.ndarray) -> np.ndarray:
    """True at the 2 largest-magnitude elements of each group of 4 along a row of W (M x K); ties: lower position."""
    ### BEGIN SOLUTION
    M, K = W.shape
    magnitude = np.abs(W.astype(np.float64)).reshape(M, K // 4, 4)  # float64 holds int8..int32 exactly
    order = np.argsort(-magnitude, axis=-1, kind="stable")  # largest first; ties keep position order
    mask = np.zeros((M, K // 4, 4), dtype=bool)
    np.put_along_axis(mask, order[..., :2], True, axis=-1)
    return mask.reshape(M, K)
    ### END SOLUTION


def prune_2_4(W: np.ndarray) -> np.ndarray:
    """W with all but the 2 largest-magnitude elements of each group of 4 along a row set to 0 (same dtype)."""
    ### BEGIN SOLUTION
    return np.where(mask_2_4(W), W, np.zeros((), W.dtype))
    ### END SOLUTION


# %% tags=["check"]
check("prune_2_4")
### BEGIN HIDDEN TESTS
check("prune_2_4", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. The metadata: 2 bits per kept element
#
# The compressed matrix keeps, for each row, its $K/2$ kept values and, for each of them, its
# **position** 0..3 within its group: `indices` of shape $(M, K/2)$, two per group, the lower
# position first. A position needs 2 bits, so a group's two make a 4-bit **nibble**, and
# two groups share a byte:
#
# - nibble of group $g$ = `first | (second << 2)`: the first (lower) position in the low 2 bits;
# - byte $j$ of a row = `nibble(2j) | (nibble(2j+1) << 4)`: group $2j$ in the low nibble;
# - `metadata` has shape $(M, \lceil K/8 \rceil)$ and dtype `uint8`; when $K/4$ is odd, the
#   last byte's high nibble is unused and 0.
#
# Put differently, a row's metadata read as one little-endian bit string holds the index of
# kept element $t$ in bits $2t$ and $2t+1$. This is the order of the PTX ISA's `mma.sp`
# metadata and of the 16-bit metadata words PyTorch builds for CUTLASS (4 groups per word,
# which are our bytes $2i, 2i+1$ read as one little-endian `uint16`).
#
# Example, one row with $K = 12$ and groups keeping positions (1, 3), (0, 2), (2, 3):
# nibbles `0b1101`, `0b1000`, `0b1110`; bytes `0b1000_1101` (141) and `0b0000_1110` (14).
#
# Write `pack_metadata(indices)` and its inverse `unpack_metadata(metadata, K)`, which
# returns the integer positions, shape $(M, K/2)$.

# %% tags=["solution"]
def pack_metadata(indices: np.ndarray) -> np.ndarray:
    """Kept positions (M x K/2, each 0..3, two per group, increasing) -> metadata (M x ceil(K/8) uint8)."""
    ### BEGIN SOLUTION
    indices = indices.astype(np.uint8)
    nibbles = indices[:, 0::2] | (indices[:, 1::2] << 2)
    if nibbles.shape[1] % 2:  # an odd number of groups: the last byte's high nibble stays 0
        nibbles = np.pad(nibbles, ((0, 0), (0, 1)))
    return (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).astype(np.uint8)
    ### END SOLUTION


def unpack_metadata(metadata: np.ndarray, K: int) -> np.ndarray:
    """Metadata (M x ceil(K/8) uint8) of a matrix with K columns -> kept positions (M x K/2 integers 0..3)."""
    ### BEGIN SOLUTION
    M = metadata.shape[0]
    nibbles = np.stack([metadata & 0xF, metadata >> 4], axis=-1).reshape(M, -1)[:, :K // 4]
    return np.stack([nibbles & 0b11, nibbles >> 2], axis=-1).reshape(M, K // 2).astype(np.int64)
    ### END SOLUTION


# %% tags=["check"]
check("metadata")
### BEGIN HIDDEN TESTS
check("metadata", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Compress
#
# `compress(W)` takes a 2:4-sparse W and returns `(values, metadata)`: `values` of shape
# $(M, K/2)$ and W's dtype, the kept elements of each row in column order, and their packed
# positions. Raise a `ValueError` if a group holds more than 2 non-zeros (good practice; the
# checks pass only 2:4 matrices).
#
# A group with fewer than 2 non-zeros still stores 2 values and 2 positions: the ones that
# `mask_2_4` keeps, that is its non-zeros and then its lowest zero positions. So
# $[0, 0, 7, 0]$ stores values $(0, 7)$ at positions $(0, 2)$, and $[0, 0, 0, 0]$ stores
# $(0, 0)$ at $(0, 1)$. The product does not depend on this choice (the stored values are
# zeros), but a file format must fix every bit.

# %% tags=["solution"]
def compress(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, metadata) of a 2:4-sparse W (M x K): the kept elements in column order and their packed positions."""
    ### BEGIN SOLUTION
    M, K = W.shape
    if ((W != 0).reshape(M, K // 4, 4).sum(axis=-1) > 2).any():
        raise ValueError("W is not 2:4 sparse: prune it first")
    mask = mask_2_4(W)  # on a 2:4 matrix: every non-zero, plus the lowest zeros of groups with fewer than 2
    values = W[mask].reshape(M, K // 2)  # boolean indexing walks each row in column order
    positions = np.nonzero(mask.reshape(M, K // 4, 4))[2].reshape(M, K // 2)
    return values, pack_metadata(positions)
    ### END SOLUTION


# %% tags=["check"]
check("compress")
### BEGIN HIDDEN TESTS
check("compress", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Decompress
#
# `decompress(values, metadata, K)` rebuilds the dense $M \times K$ matrix, in `values`'
# dtype: kept element $t$ of a row belongs to group $t \,//\, 2$, so its column is
# $4\,(t \,//\, 2)$ plus its position. `decompress(*compress(W), K)` must give back any
# 2:4 matrix W.

# %% tags=["solution"]
def decompress(values: np.ndarray, metadata: np.ndarray, K: int) -> np.ndarray:
    """The dense M x K matrix (values' dtype) whose compressed form is (values, metadata)."""
    ### BEGIN SOLUTION
    columns = 4 * (np.arange(K // 2) // 2) + unpack_metadata(metadata, K)
    dense = np.zeros((values.shape[0], K), dtype=values.dtype)
    np.put_along_axis(dense, columns, values, axis=1)
    return dense
    ### END SOLUTION


# %% tags=["check"]
check("decompress")
### BEGIN HIDDEN TESTS
check("decompress", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. The sparse product
#
# A sparse Tensor Core never sees the zeros. For each kept value $A[m, c]$ it uses the 2-bit
# position to select row $c$ of $B$, its partner in the dot product, and multiplies only
# those: $K/2$ multiply-adds per output instead of $K$, hence twice the throughput.
#
# `sparse_matmul(values, metadata, B)` computes $C = A B$ for $B$ of shape $K \times N$
# ($K = 2 \cdot$ `values.shape[1]`) from the compressed $A$ alone: gather, for every kept
# value, the row of $B$ it multiplies (an array of shape $(M, K/2, N)$), multiply, and sum
# over the kept values. Accumulate as Tensor Cores do, in a wider type than the inputs:
# `int64` for integer inputs (`int8` products overflow `int8` at once), `float32` for
# `float16` and `float32`, `float64` for `float64`. Return the result in that dtype.

# %% tags=["solution"]
def sparse_matmul(values: np.ndarray, metadata: np.ndarray, B: np.ndarray) -> np.ndarray:
    """C = A @ B (M x N) from A's compressed form (values, metadata) and a dense B (K x N)."""
    ### BEGIN SOLUTION
    K = 2 * values.shape[1]
    columns = 4 * (np.arange(K // 2) // 2) + unpack_metadata(metadata, K)  # (M, K/2): the column of A of each value
    rows_of_B = B[columns]  # (M, K/2, N): the row of B each kept value multiplies
    accumulator = np.int64 if values.dtype.kind in "iu" else np.result_type(np.float32, values.dtype)
    return np.einsum("mt,mtn->mn", values.astype(accumulator), rows_of_B.astype(accumulator))
    ### END SOLUTION


# %% tags=["check"]
check("sparse_matmul")
### BEGIN HIDDEN TESTS
check("sparse_matmul", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. What it saves in memory
#
# `compressed_bytes(M, K, dtype)` is the size of $A$ stored as `compress` stores it: $K/2$
# values per row in `dtype` plus $\lceil K/8 \rceil$ bytes of metadata per row. `dtype` is one
# of `"fp32"`, `"tf32"` (stored in 32 bits), `"fp16"`, `"bf16"`, `"fp8_e4m3"`, `"fp8_e5m2"`,
# `"int8"` and `"int4"` (4 bits: two values share a byte).

# %% tags=["solution"]
def compressed_bytes(M: int, K: int, dtype: str) -> int:
    """Bytes of A (M x K) compressed: values plus metadata."""
    ### BEGIN SOLUTION
    bits = {"fp32": 32, "tf32": 32, "fp16": 16, "bf16": 16, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8": 8, "int4": 4}
    return M * (K // 2) * bits[dtype] // 8 + M * -(-K // 8)
    ### END SOLUTION


# %% tags=["check"]
check("compressed_bytes")
### BEGIN HIDDEN TESTS
check("compressed_bytes", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 7. What it costs in accuracy, and what it saves
#
# With your functions: the fraction of a random Gaussian matrix's norm that 2:4 pruning
# keeps, against unstructured pruning that keeps the largest half of all elements wherever
# they are. The pattern costs a little: some groups hold three large weights and must drop
# one. Networks recover it by retraining with the mask fixed (Mishra et al. 2021).
# Then the bytes of a 4096 x 4096 weight matrix in a few formats, compressed against dense.

# %%
W = np.random.default_rng(0).standard_normal((1024, 1024))
flat = np.abs(W).ravel()
unstructured = np.where(np.abs(W) >= np.sort(flat)[flat.size // 2], W, 0.0)  # the largest half, anywhere
for name, pruned in [("2:4", prune_2_4(W)), ("unstructured 50%", unstructured)]:
    print(f"{name:17} keeps {(pruned != 0).mean():.0%} of the weights and "
          f"{np.linalg.norm(pruned) / np.linalg.norm(W):.4f} of the norm")

C = sparse_matmul(*compress(prune_2_4(W[:64, :256])), W[:256, :32])
print("sparse_matmul matches the dense product:", np.allclose(C, prune_2_4(W[:64, :256]) @ W[:256, :32]))

for dtype, bits in [("fp16", 16), ("int8", 8), ("int4", 4)]:
    print(f"{dtype}: compressed / dense = {compressed_bytes(4096, 4096, dtype) / (4096 * 4096 * bits / 8):.4f}")
