"""2:4 structured sparsity: magnitude pruning, the compressed format with 2-bit indices, and the sparse product.

A matrix A (M x K) is **2:4 sparse** when every group of 4 consecutive elements
of a row (columns 4g .. 4g + 3) holds at most 2 non-zeros. The sparse Tensor
Cores of NVIDIA Ampere and Hopper multiply such an A, stored compressed, by a
dense B at twice the dense math rate (Mishra et al., "Accelerating Sparse Deep
Neural Networks", arXiv 2104.08378, 2021; NVIDIA A100 whitepaper, 2020).

The compressed form of A is two arrays:

- `values` (M x K/2, A's dtype): the 2 kept elements of each group, in column
  order;
- `metadata` (M x ceil(K/8), uint8): the position (0..3) of each kept element
  within its group, 2 bits each. Read each row's bytes as one little-endian bit
  string (bit b is bit b % 8 of byte b // 8): kept element t of the row (value
  `values[m, t]`) has its index in bits 2t and 2t + 1. So a group's two indices
  make one nibble, first index in the low 2 bits, and group 2j fills the low
  nibble of byte j, group 2j + 1 the high one. When K/4 is odd, the high
  nibble of each row's last byte is unused and 0. Within a group the first
  index is lower than the second.

This is the order of the PTX ISA's sparse `mma.sp` metadata (section "Sparse
matrix storage": per group, the lower index in the lower 2 bits; equal indices,
0b0000, 0b0101, 0b1010, 0b1111, are invalid) and of the 16-bit metadata words
that PyTorch's CUTLASS conversion builds, 4 groups per word, low nibble first,
before it interleaves the words into the layout one warp's registers want:
`metadata.view("<u2")` gives those words when K is a multiple of 16.

A group with fewer than 2 non-zeros still stores 2 indices: the positions that
`mask_2_4` keeps, which are the non-zeros and then the lowest positions among
the zeros (an all-zero group stores 0 and 1, nibble 0b0100). The stored value
there is 0, so any 2 distinct positions give the same product; this rule makes
the metadata exact, so that it can be compared bit for bit.
"""

import numpy as np

from ._validate import positive_int
from .dtypes import BITS, bytes_per_element, canonical
from .roofline import Cost

GROUP = 4  # elements per group along K
KEPT = 2  # at most this many non-zeros per group
BITS_PER_INDEX = 2  # a position 0..3 within a group


# ---------------------------------------------------------------------------------------------------------------
# Arguments


def _numbers(name: str, value) -> np.ndarray:
    """A 2-D array of integers or floats."""
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold integers or floats, got dtype {array.dtype}")
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {array.shape}")
    return array


def _group_count(name: str, K: int) -> int:
    """K / 4, with an error that says what to do when K is not a positive multiple of 4."""
    if K < GROUP or K % GROUP:
        padded = max(GROUP, -(-K // GROUP) * GROUP)
        raise ValueError(f"{name} has K = {K} columns; 2:4 sparsity needs K to be a positive multiple of {GROUP}. "
                         f"Pad each row with zeros to K = {padded} (np.pad(W, ((0, 0), (0, {padded - K})))); "
                         "the zero columns change no product")
    return K // GROUP


def _weights(W) -> np.ndarray:
    """W as an M x K matrix of numbers, M >= 1 and K a positive multiple of 4."""
    W = _numbers("W", W)
    if W.shape[0] < 1:
        raise ValueError(f"W must have at least one row, got shape {W.shape}")
    _group_count("W", W.shape[1])
    return W


def _magnitude(W: np.ndarray) -> np.ndarray:
    """|W|, exactly: np.abs of int8's -128 is -128 (it wraps), so integers are taken in 64 bits, read unsigned."""
    if W.dtype.kind == "f":
        return np.abs(W)
    if W.dtype.kind == "u":
        return W.astype(np.uint64)
    return np.abs(W.astype(np.int64)).view(np.uint64)  # |-2**63| wraps to -2**63, whose unsigned bits are 2**63


# ---------------------------------------------------------------------------------------------------------------
# Pruning


def mask_2_4(W) -> np.ndarray:
    """The 2:4 magnitude-pruning mask of W (M x K): True at the 2 largest |W| of each group of 4 along K.

    Ties go to the lower column: an element is kept when fewer than 2 elements of its group beat it, where
    j beats i if |W_j| > |W_i|, or |W_j| == |W_i| and j < i. NaN has no magnitude to rank: ValueError.
    """
    W = _weights(W)
    if W.dtype.kind == "f" and np.isnan(W).any():
        row, col = (int(i) for i in np.argwhere(np.isnan(W))[0])
        raise ValueError(f"W holds NaN at ({row}, {col}); magnitude pruning cannot rank it")
    M, K = W.shape
    magnitude = _magnitude(W).reshape(M, K // GROUP, GROUP, 1)  # element i of a group on axis 2 ...
    other = magnitude.reshape(M, K // GROUP, 1, GROUP)  # ... against every element j of it on axis 3
    position = np.arange(GROUP)
    beats = (other > magnitude) | ((other == magnitude) & (position < position[:, None]))
    return (beats.sum(axis=-1) < KEPT).reshape(M, K)


def prune_2_4(W) -> np.ndarray:
    """W with all but the 2 largest-magnitude elements of each group of 4 along K set to 0 (same dtype).

    The kept positions are `mask_2_4(W)`'s. np.where, not W * mask: inf * 0 would give NaN.
    """
    W = _weights(W)
    return np.where(mask_2_4(W), W, np.zeros((), W.dtype))


def is_2_4(W) -> bool:
    """Whether every group of 4 consecutive elements along K of W (M x K) holds at most 2 non-zeros."""
    W = _weights(W)
    return bool((_nonzeros_per_group(W) <= KEPT).all())


def _nonzeros_per_group(W: np.ndarray) -> np.ndarray:
    M, K = W.shape
    return (W != 0).reshape(M, K // GROUP, GROUP).sum(axis=-1)  # NaN != 0: NaN counts as a non-zero


def prune_unstructured(W, density: float = 0.5) -> np.ndarray:
    """W keeping only its round(density * W.size) largest-magnitude elements, anywhere (ties: lower flat index).

    The unconstrained pruning that 2:4 is compared with: same number of zeros, no pattern.
    """
    W = np.asarray(W)
    if W.dtype.kind not in "iuf":
        raise TypeError(f"W must hold integers or floats, got dtype {W.dtype}")
    if isinstance(density, bool) or not isinstance(density, (int, float)) or not 0 <= density <= 1:
        raise ValueError(f"density must be a number in [0, 1] (the fraction of elements kept), got {density!r}")
    if W.dtype.kind == "f" and np.isnan(W).any():
        raise ValueError("W holds NaN; magnitude pruning cannot rank it")
    flat = _magnitude(W).ravel()
    keep = round(density * flat.size)
    # by magnitude, then by decreasing index: among equal magnitudes the lowest index sorts last, so it is kept
    order = np.lexsort((-np.arange(flat.size), flat))
    mask = np.zeros(flat.size, dtype=bool)
    mask[order[flat.size - keep:]] = True
    return np.where(mask.reshape(W.shape), W, np.zeros((), W.dtype))


# ---------------------------------------------------------------------------------------------------------------
# The compressed format


def pack_metadata(indices) -> np.ndarray:
    """Pack kept positions (M x K/2 integers 0..3, increasing within each group) into metadata (M x ceil(K/8) uint8).

    Kept element t of a row goes to bits 2t, 2t + 1 of the row's little-endian bit string (see the module docstring).
    """
    indices = _numbers("indices", indices)
    if indices.dtype.kind == "f":
        raise TypeError(f"indices must hold integers (positions 0..3 within a group), got dtype {indices.dtype}")
    M, kept = indices.shape
    if M < 1 or kept < KEPT or kept % KEPT:
        raise ValueError(f"indices must have shape (M, K/2) with M >= 1 and K a positive multiple of {GROUP} "
                         f"(2 positions per group), got shape {indices.shape}")
    if indices.min() < 0 or indices.max() >= GROUP:
        bad = tuple(int(i) for i in np.argwhere((indices < 0) | (indices >= GROUP))[0])
        raise ValueError(f"indices must lie in 0..{GROUP - 1} (a position within a group of {GROUP}); "
                         f"got {indices[bad]} at {bad}")
    indices = indices.astype(np.uint8)
    _require_increasing(indices, "indices")
    nibbles = indices[:, 0::2] | (indices[:, 1::2] << BITS_PER_INDEX)  # one group: first index in the low bits
    if nibbles.shape[1] % 2:
        nibbles = np.pad(nibbles, ((0, 0), (0, 1)))  # the unused high nibble of the last byte is 0
    return (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).astype(np.uint8)


def unpack_metadata(metadata, K: int) -> np.ndarray:
    """The kept positions (M x K/2, int64, each 0..3) that `pack_metadata` packed into metadata for K columns."""
    K = positive_int("K", K)
    groups = _group_count("the matrix", K)
    metadata = _numbers("metadata", metadata)
    if metadata.dtype != np.uint8:
        raise TypeError(f"metadata must be a uint8 array (2 groups of 2-bit indices per byte), got {metadata.dtype}")
    if metadata.shape[0] < 1 or metadata.shape[1] != metadata_columns(K):
        raise ValueError(f"metadata for K = {K} must have shape (M, {metadata_columns(K)}) with M >= 1 "
                         f"(ceil(K / 8) bytes per row), got {metadata.shape}")
    nibbles = np.stack([metadata & 0xF, metadata >> 4], axis=-1).reshape(metadata.shape[0], -1)
    if groups % 2 and nibbles[:, groups].any():
        row = int(np.argmax(nibbles[:, groups] != 0))
        raise ValueError(f"metadata row {row}: the unused high nibble of the last byte must be 0 "
                         f"(K = {K} has an odd number of groups), got {int(nibbles[row, groups]):#06b}")
    nibbles = nibbles[:, :groups]
    indices = np.stack([nibbles & 0b11, nibbles >> BITS_PER_INDEX], axis=-1).reshape(metadata.shape[0], K // 2)
    _require_increasing(indices, "metadata")
    return indices.astype(np.int64)


def _require_increasing(indices: np.ndarray, name: str) -> None:
    """Each group's two positions must be distinct and in order (PTX: equal indices are invalid metadata)."""
    first, second = indices[:, 0::2], indices[:, 1::2]
    if (first >= second).any():
        row, group = (int(i) for i in np.argwhere(first >= second)[0])
        raise ValueError(f"{name}: row {row}, group {group} holds positions ({first[row, group]}, "
                         f"{second[row, group]}); a group's two positions must be increasing")


def metadata_columns(K: int) -> int:
    """Bytes of metadata per row for K columns: K/2 indices of 2 bits are K bits, rounded up to whole bytes."""
    return -(-K // 8)


def kept_columns(indices: np.ndarray) -> np.ndarray:
    """The column of A of each kept value: its group's first column, 4 * (t // 2), plus its position."""
    return GROUP * (np.arange(indices.shape[1]) // KEPT) + indices


def compress(W) -> tuple[np.ndarray, np.ndarray]:
    """(values, metadata) of a 2:4-sparse W (M x K); ValueError when a group holds more than 2 non-zeros.

    values (M x K/2, W's dtype) are the kept elements in column order; metadata (M x ceil(K/8), uint8) their
    2-bit positions as the module docstring lays them out. The kept positions are `mask_2_4(W)`'s: on a 2:4
    matrix they are all the non-zeros, completed with the lowest zero positions of groups that have fewer.
    """
    W = _weights(W)
    crowded = _nonzeros_per_group(W) > KEPT
    if crowded.any():
        row, group = (int(i) for i in np.argwhere(crowded)[0])
        raise ValueError(f"W is not 2:4 sparse: row {row}, columns {GROUP * group}..{GROUP * group + GROUP - 1} hold "
                         f"{int(_nonzeros_per_group(W)[row, group])} non-zeros; prune it first (prune_2_4)")
    mask = mask_2_4(W)
    M, K = W.shape
    values = W[mask].reshape(M, K // 2)  # boolean indexing walks each row in column order
    indices = np.nonzero(mask.reshape(M, K // GROUP, GROUP))[2].reshape(M, K // 2)  # position within the group
    return values, pack_metadata(indices)


def _compressed(values, metadata, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Validated values and their kept positions, for a compressed matrix of K columns."""
    values = _numbers("values", values)
    if values.shape[0] < 1 or 2 * values.shape[1] != K:
        raise ValueError(f"values must have shape (M, K/2) = (M, {K // 2}) with M >= 1 for K = {K}, "
                         f"got {values.shape}")
    indices = unpack_metadata(metadata, K)
    if indices.shape[0] != values.shape[0]:
        raise ValueError(f"metadata has {indices.shape[0]} rows but values has {values.shape[0]}: one row each per "
                         "row of A")
    return values, indices


def decompress(values, metadata, K: int) -> np.ndarray:
    """The dense M x K matrix (values' dtype) that `compress` turned into (values, metadata)."""
    K = positive_int("K", K)
    _group_count("the matrix", K)
    values, indices = _compressed(values, metadata, K)
    dense = np.zeros((values.shape[0], K), dtype=values.dtype)
    np.put_along_axis(dense, kept_columns(indices), values, axis=1)
    return dense


def accumulator_dtype(*dtypes) -> np.dtype:
    """What a product accumulates in: int64 for integers (nothing wraps), float32 for fp16 and fp32, else float64.

    Tensor Cores accumulate fp16/bf16 products in fp32 and int8 products in int32; int64 keeps the integer
    examples here exact whatever their size.
    """
    if all(np.dtype(d).kind in "iu" for d in dtypes):
        return np.dtype(np.int64)
    return np.result_type(np.float32, *dtypes)


def sparse_matmul(values, metadata, B) -> np.ndarray:
    """A @ B from A's compressed form (values, metadata) and a dense B (K x N), K = 2 * values.shape[1].

    Each kept value A[m, c] multiplies row c of B: the metadata selects, for every kept value, the row of B
    it needs (a gather), as the sparse Tensor Core's operand multiplexers do, and the pruned zeros are never
    multiplied. M * K/2 * N multiply-adds, half the dense count. Accumulates in `accumulator_dtype`.
    """
    values = _numbers("values", values)
    B = _numbers("B", B)
    K = 2 * values.shape[1]
    if B.shape[0] != K:
        raise ValueError(f"B has {B.shape[0]} rows, but the compressed A has K = 2 x values.shape[1] = {K} columns: "
                         f"B must be K x N = {K} x N")
    _group_count("the compressed A", K)
    values, indices = _compressed(values, metadata, K)
    rows_of_B = B[kept_columns(indices)]  # (M, K/2, N): the row of B that each kept value multiplies
    accumulator = accumulator_dtype(values.dtype, B.dtype)
    return np.einsum("mt,mtn->mn", values.astype(accumulator), rows_of_B.astype(accumulator))


# ---------------------------------------------------------------------------------------------------------------
# What it saves


def compressed_bytes(M: int, K: int, dtype: str) -> int:
    """Bytes of A (M x K) compressed: K/2 values per row in `dtype` plus ceil(K/8) bytes of metadata per row.

    Against the dense M K elements, for K a multiple of 8: fp16/bf16 (2 x 16 + 4 bits per group of 4 instead
    of 64) 0.5625; fp8/int8 0.625; fp32/tf32 0.53125; int4 0.75. The 2-bit indices cost relatively more the
    narrower the values are.
    """
    M, K = positive_int("M", M), positive_int("K", K)
    _group_count("A", K)
    value_bits = BITS[canonical(dtype)]
    return M * (K // 2) * value_bits // 8 + M * metadata_columns(K)


def dense_bytes(M: int, K: int, dtype: str) -> int:
    """Bytes of A (M x K) stored dense."""
    M, K = positive_int("M", M), positive_int("K", K)
    return int(M * K * bytes_per_element(dtype))


def sparse_gemm(M: int, N: int, K: int, dtype: str = "fp16") -> Cost:
    """C (M x N) = A (M x K, 2:4, compressed) @ B (K x N): the math executed and the minimum traffic.

    Only the kept half of A's products is computed: M N K / 2 multiply-adds, M N K FLOPs, against the
    dense 2 M N K. Datasheets say the same the other way round: they count 2 M N K and print a peak twice
    the dense one ("with sparsity"). Traffic: compressed A, B and C, once each.
    """
    M, N, K = positive_int("M", M), positive_int("N", N), positive_int("K", K)
    size = bytes_per_element(dtype)
    return Cost(flops=M * N * K, bytes=compressed_bytes(M, K, dtype) + (K * N + M * N) * size)
