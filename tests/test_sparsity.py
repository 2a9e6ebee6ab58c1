"""The 2:4 sparsity reference: the pruning rule, the exact metadata layout, the sparse product, and clear errors."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from aisys import roofline, sparsity

DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8]


def kept_by_brute_force(group) -> list[int]:
    """The 2 positions of a group of 4 that magnitude pruning keeps: largest |x| first, lower position on ties."""
    return sorted(sorted(range(4), key=lambda i: (-abs(int(group[i]) if group.dtype.kind in "iu" else float(group[i])),
                                                  i))[:2])


def random_matrix(rng, M, K, dtype):
    """Small integers (many ties and zeros) in any dtype, with int8's -128 where it fits."""
    if np.dtype(dtype).kind == "u":
        return rng.integers(0, 4, size=(M, K)).astype(dtype)
    W = rng.integers(-3, 4, size=(M, K)).astype(dtype)
    if dtype == np.int8:
        W[0, 0] = -128
    return W


def two_four(rng, M, K, dtype=np.float32):
    """A random 2:4 matrix with groups of 0, 1 and 2 non-zeros."""
    W = rng.integers(-9, 10, size=(M, K)).astype(dtype)
    keep = rng.random((M, K // 4, 4)).argsort(axis=-1) < rng.integers(0, 3, size=(M, K // 4, 1))
    return np.where(keep.reshape(M, K), W, 0).astype(dtype)


# ---------------------------------------------------------------------------------------------------------------
# Pruning


@pytest.mark.parametrize("dtype", DTYPES)
def test_mask_keeps_the_two_largest_magnitudes_lower_position_on_ties(dtype):
    rng = np.random.default_rng(1)
    W = random_matrix(rng, 5, 16, dtype)
    mask = sparsity.mask_2_4(W)
    for m in range(5):
        for g in range(4):
            assert np.flatnonzero(mask[m, 4 * g:4 * g + 4]).tolist() == kept_by_brute_force(W[m, 4 * g:4 * g + 4])


def test_magnitude_not_value_and_int8_minus_128_is_the_largest():
    W = np.array([[-128, 127, 1, -1], [-7, 1, 2, 3], [5, 5, 5, 5], [0, 0, 0, 0]], dtype=np.int8)
    assert sparsity.prune_2_4(W).tolist() == [[-128, 127, 0, 0], [-7, 0, 0, 3], [5, 5, 0, 0], [0, 0, 0, 0]]


def test_prune_keeps_dtype_and_gives_a_2_4_matrix_and_inf_stays_inf():
    W = np.array([[np.inf, -np.inf, 1.0, 2.0, -0.0, 0.0, 0.5, 0.0]], dtype=np.float32)
    pruned = sparsity.prune_2_4(W)
    assert pruned.dtype == np.float32 and sparsity.is_2_4(pruned)
    assert pruned.tolist() == [[np.inf, -np.inf, 0, 0, 0, 0, 0.5, 0]]  # W * mask would make NaN of inf * 0


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.sampled_from(DTYPES), st.integers(0, 2**32 - 1))
def test_pruning_is_idempotent_and_keeps_exactly_two_per_group(M, groups, dtype, seed):
    W = random_matrix(np.random.default_rng(seed), M, 4 * groups, dtype)
    pruned = sparsity.prune_2_4(W)
    assert (sparsity.mask_2_4(W).reshape(M, groups, 4).sum(axis=-1) == 2).all()
    assert np.array_equal(sparsity.prune_2_4(pruned), pruned)
    assert sparsity.is_2_4(pruned) and sparsity.is_2_4(W) == np.array_equal(pruned, W)


def test_is_2_4_counts_non_zeros_per_group_along_rows():
    assert sparsity.is_2_4(np.array([[1, 0, 0, 2, 0, 0, 0, 0]]))
    assert not sparsity.is_2_4(np.array([[1, 1, 1, 0, 0, 0, 0, 0]]))
    assert not sparsity.is_2_4(np.array([[np.nan, 1.0, 1.0, 0.0]]))  # NaN is not zero
    columns_2_4 = np.array([[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])  # 2:4 down columns only
    assert not sparsity.is_2_4(columns_2_4)


def test_unstructured_pruning_keeps_the_largest_anywhere_and_more_of_the_norm_than_2_4():
    W = np.array([[9.0, 8.0, 7.0, 6.0], [1.0, 2.0, 3.0, 4.0]])
    assert sparsity.prune_unstructured(W, 0.5).tolist() == [[9, 8, 7, 6], [0, 0, 0, 0]]
    assert sparsity.prune_unstructured(np.ones((1, 4)), 0.5).tolist() == [[1, 1, 0, 0]]  # ties: lower index
    G = np.random.default_rng(0).standard_normal((512, 512))
    energy = {name: (prune(G) ** 2).sum() / (G**2).sum()
              for name, prune in [("2:4", sparsity.prune_2_4), ("unstructured", sparsity.prune_unstructured)]}
    # Gaussian, top half by magnitude: 2 (c phi(c) + 1 - Phi(c)) at the median c = 0.6745 of |x|, 0.9286
    assert energy["unstructured"] == pytest.approx(0.9286, abs=0.003)
    assert 0.85 < energy["2:4"] < energy["unstructured"]


# ---------------------------------------------------------------------------------------------------------------
# The metadata layout


def test_metadata_bits_low_first_in_each_byte_and_the_unused_nibble_is_zero():
    # row 0: groups (1, 3), (0, 2), (2, 3): nibbles 0b1101, 0b1000, 0b1110 -> bytes 0b1000_1101, 0b0000_1110
    indices = np.array([[1, 3, 0, 2, 2, 3], [0, 1, 0, 1, 0, 1]])
    metadata = sparsity.pack_metadata(indices)
    assert metadata.dtype == np.uint8 and metadata.tolist() == [[0b1000_1101, 0b0000_1110], [0x44, 0x04]]
    assert sparsity.unpack_metadata(metadata, 12).tolist() == indices.tolist()


def test_an_empty_group_stores_positions_0_and_1_and_a_lone_non_zero_the_lowest_zero_beside_it():
    values, metadata = sparsity.compress(np.array([[0, 0, 0, 0, 0, 0, 0, 5]], dtype=np.int32))
    assert values.tolist() == [[0, 0, 0, 5]] and values.dtype == np.int32
    assert metadata.tolist() == [[0b1100_0100]]  # group 0: (0, 1); group 1: (0, 3)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 5), st.integers(1, 7), st.integers(0, 2**32 - 1))
def test_compress_then_decompress_is_the_identity_on_2_4_matrices(M, groups, seed):
    W = two_four(np.random.default_rng(seed), M, 4 * groups)
    values, metadata = sparsity.compress(W)
    assert values.shape == (M, 2 * groups) and metadata.shape == (M, (groups + 1) // 2)
    assert np.array_equal(sparsity.decompress(values, metadata, 4 * groups), W)
    assert np.array_equal(sparsity.pack_metadata(sparsity.unpack_metadata(metadata, 4 * groups)), metadata)


def test_metadata_is_pytorch_cutlass_words_before_their_interleaving():
    conversions = pytest.importorskip("torch.sparse._semi_structured_conversions")
    W = sparsity.prune_2_4(np.random.default_rng(2).standard_normal((32, 64)).astype(np.float16))
    theirs, reordered = conversions.sparse_semi_structured_from_dense_cutlass(torch.from_numpy(W))
    M, words = reordered.shape
    offsets = conversions._calculate_meta_reordering_scatter_offsets(M, words, reordered.dtype, "cpu")
    meta = reordered.reshape(-1)[offsets].reshape(M, words)  # undo their scatter into the warp layout
    values, metadata = sparsity.compress(W)
    assert np.array_equal(values, theirs.numpy())
    assert np.array_equal(metadata.view("<u2"), meta.numpy().view(np.uint16))


# ---------------------------------------------------------------------------------------------------------------
# The sparse product


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.float16, np.float32, np.float64])
def test_sparse_matmul_is_the_dense_product_of_the_pruned_matrix(dtype):
    rng = np.random.default_rng(3)
    W = sparsity.prune_2_4(random_matrix(rng, 6, 20, dtype) * (40 if dtype == np.int8 else 1))
    B = random_matrix(rng, 20, 7, dtype)
    C = sparsity.sparse_matmul(*sparsity.compress(W), B)
    accumulator = sparsity.accumulator_dtype(dtype)
    assert C.dtype == accumulator == (np.int64 if np.dtype(dtype).kind == "i" else np.result_type(dtype, np.float32))
    expected = (torch.from_numpy(W.astype(accumulator)) @ torch.from_numpy(B.astype(accumulator))).numpy()
    assert np.array_equal(C, expected)  # small integers: exact in every accumulator


def test_sparse_matmul_does_not_wrap_int8_products():
    W = np.array([[127, 0, 0, 127]], dtype=np.int8)
    B = np.full((4, 1), 127, dtype=np.int8)
    assert sparsity.sparse_matmul(*sparsity.compress(W), B).tolist() == [[2 * 127 * 127]]


# ---------------------------------------------------------------------------------------------------------------
# What it saves


@pytest.mark.parametrize("dtype, ratio", [("fp16", 0.5625), ("bf16", 0.5625), ("int8", 0.625), ("fp8_e4m3", 0.625),
                                          ("fp32", 0.53125), ("int4", 0.75)])
def test_compressed_bytes_against_dense(dtype, ratio):
    assert sparsity.compressed_bytes(64, 4096, dtype) / sparsity.dense_bytes(64, 4096, dtype) == ratio


def test_compressed_bytes_rounds_metadata_up_to_whole_bytes():
    assert sparsity.compressed_bytes(3, 4, "fp16") == 3 * (2 * 2 + 1)
    assert sparsity.compressed_bytes(1, 12, "int4") == 3 + 2


def test_sparse_gemm_halves_the_math_and_shrinks_a():
    dense, sparse = roofline.gemm(4096, 1024, 8192, "bf16"), sparsity.sparse_gemm(4096, 1024, 8192, "bf16")
    assert sparse.flops == dense.flops / 2
    assert dense.bytes - sparse.bytes == 4096 * 8192 * 2 * (1 - 0.5625)


# ---------------------------------------------------------------------------------------------------------------
# Bad input

GOOD = np.array([[1.0, 0.0, 0.0, 2.0]])
PACKED = sparsity.pack_metadata([[0, 3]])

BAD = [
    (sparsity.prune_2_4, (np.ones(8),), ValueError, "W must be a 2-D matrix"),
    (sparsity.prune_2_4, (np.ones((2, 6)),), ValueError, r"K = 6 columns.*multiple of 4.*Pad.*K = 8"),
    (sparsity.prune_2_4, (np.ones((0, 4)),), ValueError, "W must have at least one row"),
    (sparsity.mask_2_4, (np.array([[True, False, True, False]]),), TypeError, "W must hold integers or floats"),
    (sparsity.mask_2_4, (np.array([[1.0, np.nan, 0.0, 0.0]]),), ValueError, r"NaN at \(0, 1\)"),
    (sparsity.is_2_4, (np.ones((3, 5)),), ValueError, "K = 5"),
    (sparsity.compress, (np.ones((2, 4)),), ValueError, r"not 2:4 sparse: row 0, columns 0..3 hold 4 non-zeros"),
    (sparsity.pack_metadata, ([[0, 4]],), ValueError, r"indices must lie in 0..3"),
    (sparsity.pack_metadata, ([[-1, 2]],), ValueError, r"indices must lie in 0..3"),
    (sparsity.pack_metadata, ([[2, 1]],), ValueError, r"indices: row 0, group 0 holds positions \(2, 1\)"),
    (sparsity.pack_metadata, ([[1, 1]],), ValueError, "must be increasing"),
    (sparsity.pack_metadata, ([[0, 1, 2]],), ValueError, r"indices must have shape \(M, K/2\)"),
    (sparsity.pack_metadata, ([[0.0, 1.0]],), TypeError, "indices must hold integers"),
    (sparsity.unpack_metadata, (PACKED.astype(np.int8), 4), TypeError, "metadata must be a uint8 array"),
    (sparsity.unpack_metadata, (PACKED, 12), ValueError, r"metadata for K = 12 must have shape \(M, 2\)"),
    (sparsity.unpack_metadata, (np.zeros((1, 2), np.uint8), 8), ValueError, r"must have shape \(M, 1\)"),
    (sparsity.unpack_metadata, (np.array([[0x34]], np.uint8), 4), ValueError, "unused high nibble"),
    (sparsity.unpack_metadata, (np.array([[0b0101]], np.uint8), 4), ValueError, r"positions \(1, 1\)"),
    (sparsity.unpack_metadata, (PACKED, 6), ValueError, "K = 6"),
    (sparsity.decompress, (np.ones((1, 3)), PACKED, 4), ValueError, r"values must have shape \(M, K/2\) = \(M, 2\)"),
    (sparsity.decompress, (np.ones((2, 2)), PACKED, 4), ValueError, "metadata has 1 rows but values has 2"),
    (sparsity.decompress, (np.ones((1, 2)), PACKED, 0), ValueError, "K must be an integer >= 1"),
    (sparsity.decompress, (np.ones((1, 2)), PACKED, 2.0), ValueError, "K must be an integer >= 1"),
    (sparsity.sparse_matmul, (np.ones((1, 2)), PACKED, np.ones((3, 2))), ValueError,
     r"B has 3 rows, but the compressed A has K = 2 x values.shape\[1\] = 4 columns"),
    (sparsity.sparse_matmul, (np.ones((1, 2)), PACKED, np.ones(4)), ValueError, "B must be a 2-D matrix"),
    (sparsity.sparse_matmul, (np.ones((1, 3)), PACKED, np.ones((6, 2))), ValueError, "K = 6"),
    (sparsity.sparse_matmul, (np.ones((1, 2)), PACKED.astype(np.uint16), np.ones((4, 2))), TypeError, "uint8"),
    (sparsity.sparse_matmul, (np.ones((1, 2)), np.array([[0b0000]], np.uint8), np.ones((4, 2))), ValueError,
     "must be increasing"),
    (sparsity.compressed_bytes, (4, 10, "fp16"), ValueError, "K = 10"),
    (sparsity.compressed_bytes, (0, 8, "fp16"), ValueError, "M must be an integer >= 1"),
    (sparsity.compressed_bytes, (4, 8, "fp12"), ValueError, "dtype must be one of"),
    (sparsity.prune_unstructured, (GOOD, 1.5), ValueError, r"density must be a number in \[0, 1\]"),
    (sparsity.prune_unstructured, (np.array([[np.nan]]), 0.5), ValueError, "NaN"),
]


@pytest.mark.parametrize("function, args, error, message", BAD, ids=lambda v: getattr(v, "__name__", None))
def test_bad_input_gives_a_clear_error_naming_the_argument(function, args, error, message):
    with pytest.raises(error, match=message):
        function(*args)
