"""Checks: 2:4 pruning, the packed metadata, compress/decompress, the sparse product.

Expected values come from `aisys.sparsity`, whose tests pin its metadata to
PyTorch's CUTLASS conversion bit for bit. Data are small integers, as multiples
of 1/8 for floats: they give ties and zeros on purpose, and every product and sum
of them is exact in float16 inputs with float32 accumulation, so any summation
order gives the reference's bits. Results must keep the stated dtypes: W's for
pruning, compress and decompress, uint8 metadata, the accumulator's for the product.

Every hidden run covers, beside seeded random matrices of every dtype (float32,
float16, float64, int8, int32; M from 1, K from 4, odd and even numbers of
groups): negative weights larger in magnitude than positive ones, ties of
magnitude, int8's -128, groups with 0 and 1 non-zeros, a single group (K = 4),
a single row, and a square matrix whose row groups and column groups differ.
"""

import numpy as np

from aisys import sparsity

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, describe, unredacted

DTYPES = ["float32", "float16", "float64", "int8", "int32"]


# ---------------------------------------------------------------------------------------------------------------
# Data


def _numbers(rng, shape, dtype, spread=4) -> np.ndarray:
    """Integers in [-spread, spread]: many ties and zeros. Floats hold them as multiples of 1/8 (exact in fp16)."""
    values = rng.integers(-spread, spread + 1, size=shape)
    return (values / 8).astype(dtype) if np.dtype(dtype).kind == "f" else values.astype(dtype)


def _two_four(rng, M, K, dtype) -> np.ndarray:
    """A 2:4 matrix whose groups hold 0, 1 or 2 non-zeros at random positions, negatives included."""
    values = _numbers(rng, (M, K), dtype, spread=9)
    values[values == 0] = 1
    count = rng.integers(0, 3, size=(M, K // 4, 1))
    keep = rng.random((M, K // 4, 4)).argsort(axis=-1) < count  # the first `count` of a random order
    return np.where(keep.reshape(M, K), values, 0).astype(dtype)


def _shape(rng) -> tuple[int, int]:
    return int(rng.integers(1, 10)), 4 * int(rng.integers(1, 10))


def _as(rows, dtype) -> np.ndarray:
    return np.array(rows, dtype=dtype)


# Matrices every hidden run prunes (W) and compresses (their 2:4 versions): the edges named in the docstring.
EDGE_WEIGHTS = [
    _as([[1, 2, 3, 4], [5, 6, 7, 8], [-9, 0, 0, 0], [0, 0, 0, 1]], "int32"),  # row groups differ from column groups
    _as([[-128, 127, 1, -1, 3, -3, 3, -3]], "int8"),  # |-128| wraps in int8; equal magnitudes of both signs
    _as([[0, -0.5, 0.25, 0.5]], "float16"),  # one group, negative tie
    _as([[0, 0, 0, 0, -3, 0, 0, 0, 0, 0, 0, 2]], "float32"),  # empty group; lone negative; lone value at the end
    _as([[-7, 1, 2, 3, 0, 0, 5, -5], [2, 2, 2, 2, -1, -2, -3, -4]], "float64"),
    _as([[1, 256, -300, 400, -65504, 65504, 0.5, -1]], "float16"),  # squares past 65504: inf in float16, a false tie
]
# Products whose accumulator matters whatever the seed: int32 weights and activations near 2**30 (their products,
# near 2**60, wrap around in an int32 accumulator), and float16 sums of 2048 + 1 (float16 keeps 11 bits: 2048).
EDGE_PRODUCTS = [
    (_as([[2**30, 0, 0, -2**30 + 1], [0, 3, -2**31 + 1, 0]], "int32"),
     _as([[2**30 - 1, 1], [-2**30, 7], [2**30 + 5, -2**30], [2**30, 2**30]], "int32")),
    (_as([[32, 0, 0, 1, 0, 0, -1, 0.5]], "float16"),
     _as([[64, 1], [0.5, 0], [3, 0], [1, 2], [2, 0], [0, 0], [-0.125, 4], [2, 8]], "float16")),
]
EDGE_TWO_FOUR = [
    _as([[-3, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, -5]], "float32"),  # lone negative; empty group; equal magnitudes
    _as([[0, 0, 0, 7]], "float16"),
    _as([[-128, 0, 0, 127, 0, 1, -1, 0], [0, 0, 0, 0, 0, 0, 9, 0]], "int8"),
    _as([[1, 0, 2, 0], [0, 3, 0, 4], [5, 6, 0, 0], [0, 0, -7, -8]], "int32"),
]


# ---------------------------------------------------------------------------------------------------------------
# Comparing, and saying what a difference usually means


def _label(hidden: bool, i: int, count: int) -> str:
    return f"{'hidden case' if hidden else 'case'} {i} of {count}"


def _call_text(function: str, case: dict) -> str:
    return f"{function}({', '.join(f'{k}={describe(v)}' for k, v in case.items())})"


def _positions(metadata: np.ndarray, K: int) -> np.ndarray:
    """The 2-bit fields of metadata as positions (M, K/2), read without judging them (students' bits too)."""
    nibbles = np.stack([metadata & 0xF, metadata >> 4], axis=-1).reshape(metadata.shape[0], -1)[:, :K // 4]
    return np.stack([nibbles & 3, nibbles >> 2], axis=-1).reshape(metadata.shape[0], -1)


def _group_text(W: np.ndarray, row: int, group: int) -> str:
    first = 4 * group
    values = unredacted(f" = {W[row, first:first + 4].tolist()}")  # W's values are a hidden case's data
    return f"row {row}, group {group} (columns {first}..{first + 3}){values}"


def _pruning_hint(W: np.ndarray, got_mask: np.ndarray, expected_mask: np.ndarray) -> str:
    """Name the first group kept wrongly and the rule it breaks."""
    if got_mask.shape != expected_mask.shape:
        return "The mask has W's shape (M x K): one flag per element."
    M, K = W.shape
    kept = (got_mask != 0).reshape(M, K // 4, 4)
    wrong_groups = np.argwhere((kept != expected_mask.reshape(M, K // 4, 4)).any(axis=-1))
    if not len(wrong_groups):
        return "The right elements, in the wrong type: return a boolean array (dtype bool)."
    row, group = (int(i) for i in wrong_groups[0])
    mine, yours = np.flatnonzero(expected_mask.reshape(M, K // 4, 4)[row, group]), np.flatnonzero(kept[row, group])
    text = f"In {_group_text(W, row, group)}, " + unredacted(f"keep positions {mine.tolist()}; yours keeps "
                                                             f"{yours.tolist()}.", "yours keeps other positions.")
    values = W[row, 4 * group:4 * group + 4].astype(np.float64)
    magnitude = np.abs(values)
    if len(yours) > 2 and set(mine) <= set(yours) and (magnitude[yours] >= magnitude[mine].min()).all():
        return text + (" Keep exactly 2: among equal magnitudes the lower position wins, so a threshold at the second "
                       "largest magnitude keeps too many when magnitudes tie (argsort with kind='stable' on -|w|).")
    if len(yours) != 2:
        return text + (" Keep exactly 2 of each group of 4 consecutive elements of a row (along K), not of a "
                       "column.")
    with np.errstate(over="ignore"):
        squares = W[row, 4 * group:4 * group + 4] * W[row, 4 * group:4 * group + 4]  # in W's dtype, as numpy does
    if list(yours) == sorted(np.argsort(-squares.astype(np.float64), kind="stable")[:2]) and set(yours) != set(mine):
        wraps = (" int8 arithmetic wraps around: np.abs of -128 is -128, and w * w wraps too." if W.dtype == np.int8
                 else f" That ranks w * w in {W.dtype}, which overflows (in float16, past 256 to inf: a false tie).")
        return text + wraps + " Rank |w| in a wider type: np.abs(W.astype(np.float64))."
    if (values < 0).any() and W[row, 4 * group + yours].astype(np.float64).sum() > W[row, 4 * group + mine].sum():
        return text + (" Rank by magnitude |w|: a large negative weight matters as much as a positive one"
                       + (" (and np.abs of an int8 -128 is -128: widen the type first)." if W.dtype == np.int8
                          else "."))
    return text + " Among equal magnitudes the lower position wins (argsort with kind='stable' on -|w|)."


def _metadata_hint(indices: np.ndarray, got: np.ndarray, expected: np.ndarray) -> str:
    if got.shape != expected.shape:
        return (f"Metadata has ceil(K / 8) = {expected.shape[1]} bytes per row: K/2 positions of 2 bits each, "
                "two groups per byte.")
    nibble_swapped = (expected << 4) | (expected >> 4)  # uint8: the shift drops the high nibble
    index_swapped = ((expected & 0x33) << 2) | ((expected >> 2) & 0x33)
    if np.array_equal(got, expected):
        return "The right bytes, in the wrong type: return them as a uint8 array."
    if np.array_equal(got, nibble_swapped.astype(np.uint8)):
        return ("Your groups are in the wrong nibbles: group 2j goes to the LOW nibble of byte j, group 2j + 1 to "
                "the high one.")
    if np.array_equal(got, index_swapped.astype(np.uint8)):
        return "Your positions are swapped within each group: the first (lower) position goes in the LOW 2 bits."
    row, byte = (int(i) for i in np.argwhere(got != expected)[0])
    groups = indices[row, 4 * byte:4 * byte + 4].tolist()
    return (f"Row {row}, byte {byte} holds groups {2 * byte} and {2 * byte + 1}"
            + unredacted(f", positions {groups}: expected {int(expected[row, byte]):#010b}, got "
                         f"{int(got[row, byte]):#010b}", " and differs") + ". Byte = nibble(2j) | "
            "nibble(2j+1) << 4, nibble = first | second << 2: the 2-bit fields fill each byte from the least "
            "significant end.")


def _blamed(student, helper: str, arguments: dict, expected: np.ndarray, user: str) -> str:
    """'' unless the student's `helper` is wrong on these arguments (values or dtype): then that it is the cause."""
    try:
        got = student.call(helper, returns="array", **arguments)
        assert_close(got, expected)
        if got.dtype == expected.dtype:
            return ""
    except CheckFailure as failure:
        if any(words in str(failure) for words in ("not implemented", "not defined")):
            return ""  # nothing to blame yet
    return (f"Your {helper} is wrong on this case, and so is {user} if it uses it: fix {helper} first (its check says "
            "how).")


# ---------------------------------------------------------------------------------------------------------------


@check(points=2)
def prune_2_4(student, rng, hidden):
    """mask_2_4 and prune_2_4 keep the 2 largest magnitudes of each group of 4 along K, ties to the lower position."""
    cases = [_as([[-7, 1, 2, 3], [4, -4, 4, -4], [0, 0, 9, 0], [1, 0, 0, -1]], "int8"),
             _as([[0.5, -2, 1, 0.25, 3, -3, 3, 1], [0, 0, 0, 0, -1, 0, 0, 0]], "float32")]
    if hidden:
        cases = list(EDGE_WEIGHTS)
        cases += [_numbers(rng, _shape(rng), dtype) for dtype in DTYPES]
        cases += [rng.standard_normal(_shape(rng)).astype(str(rng.choice(["float32", "float64"]))) for _ in range(2)]
    cases = [{"W": W} for W in cases]
    compare_cases(student, "mask_2_4", cases, sparsity.mask_2_4, returns="array", hidden=hidden, dtype="reference",
                  hint=lambda case, got, expected: _pruning_hint(case["W"], got, expected))
    compare_cases(student, "prune_2_4", cases, sparsity.prune_2_4, returns="array", hidden=hidden, dtype="reference",
                  hint=lambda *_: "prune_2_4 keeps what mask_2_4 keeps, in W's dtype, and zeros the rest.")


@check(points=2)
def metadata(student, rng, hidden):
    """pack_metadata puts 2-bit positions low bits first, 2 groups per byte; unpack_metadata reads them back."""
    cases = [_as([[1, 3, 0, 2, 2, 3], [0, 1, 0, 1, 0, 1]], "int64"), _as([[0, 3, 1, 2, 0, 2, 1, 3]], "int64")]
    if hidden:
        pairs = np.array([(a, b) for a in range(4) for b in range(a + 1, 4)])  # the 6 valid groups
        cases = [_as([[2, 3]], "int64"), pairs.reshape(1, -1), pairs.reshape(3, 4)]
        for _ in range(6):
            M, K = _shape(rng)
            cases.append(pairs[rng.integers(0, 6, size=(M, K // 4))].reshape(M, K // 2))
    compare_cases(student, "pack_metadata", [{"indices": indices} for indices in cases], sparsity.pack_metadata,
                  returns="array", hidden=hidden, dtype="reference",
                  hint=lambda case, got, expected: _metadata_hint(case["indices"], got, expected))
    packed = [{"metadata": sparsity.pack_metadata(indices), "K": 2 * indices.shape[1]} for indices in cases]
    compare_cases(student, "unpack_metadata", packed, sparsity.unpack_metadata, returns="array", hidden=hidden,
                  hint=lambda *_: "Read the bits in the order pack_metadata writes them: low nibble first, and in "
                                  "each nibble the first position in the low 2 bits; return shape (M, K/2).")


def _two_four_cases(rng, hidden) -> list[np.ndarray]:
    if not hidden:
        return [_as([[0, -3, 0, 2, 0, 0, 0, 0], [1, 0, 0, 0, 4, 0, -4, 0]], "float32"),
                _as([[0, 0, 7, -9, 1, 2, 0, 0, 0, 0, 0, 3]], "int8")]
    cases = list(EDGE_TWO_FOUR)
    return cases + [_two_four(rng, *_shape(rng), dtype) for dtype in DTYPES + list(rng.choice(DTYPES, size=3))]


@check(points=2)
def compress(student, rng, hidden):
    """compress(W) gives the kept values in column order (W's dtype) and their packed positions, bit for bit."""
    cases = _two_four_cases(rng, hidden)
    for i, W in enumerate(cases, 1):
        where = f"{_label(hidden, i, len(cases))}: {_call_text('compress', {'W': W})}"
        expected_values, expected_metadata = sparsity.compress(W)
        try:
            got = student.call("compress", returns="list", W=W)
            if len(got) != 2 or not all(isinstance(part, np.ndarray) for part in got):
                raise CheckFailure(f"expected a pair of arrays (values, metadata), got {describe(got)}")
            _compare_compressed(W, got, expected_values, expected_metadata)
        except CheckFailure as failure:
            positions = sparsity.unpack_metadata(expected_metadata, W.shape[1])
            blamed = (_blamed(student, "mask_2_4", {"W": W}, sparsity.mask_2_4(W), "compress")
                      or _blamed(student, "pack_metadata", {"indices": positions}, expected_metadata, "compress"))
            raise CheckFailure(f"{where}: {failure}" + (f" {blamed}" if blamed else "")) from None


def _compare_compressed(W: np.ndarray, got: list, expected_values: np.ndarray, expected_metadata: np.ndarray) -> None:
    """CheckFailure unless compress's (values, metadata) are the reference's, saying which part differs and how."""
    values, metadata = got
    M, K = W.shape
    if metadata.dtype != np.uint8 or metadata.shape != expected_metadata.shape:
        raise CheckFailure(f"metadata: expected a uint8 array of shape {expected_metadata.shape} "
                           f"(ceil(K / 8) bytes per row), got {describe(metadata)}")
    got_positions, positions = _positions(metadata, K), sparsity.unpack_metadata(expected_metadata, K)
    if not np.array_equal(got_positions, positions):
        row, t = (int(i) for i in np.argwhere(got_positions != positions)[0])
        pair = slice(t - t % 2, t - t % 2 + 2)  # the two positions of value t's group
        raise CheckFailure(
            f"metadata: in {_group_text(W, row, t // 2)} "
            + unredacted(f"expected positions {positions[row, pair].tolist()}, got "
                         f"{got_positions[row, pair].tolist()}", "the positions differ") +
            " (read with the layout of part 2). Store the non-zeros' positions in increasing order; a group with "
            "fewer than 2 non-zeros completes them with its lowest zero positions, as mask_2_4 keeps them.")
    if values.dtype != W.dtype:
        raise CheckFailure(f"values: expected dtype {W.dtype} (W's), got {values.dtype}")
    try:
        assert_close(values, expected_values, where="values")
    except CheckFailure as failure:
        raise CheckFailure(f"{failure}. values[m, t] is the element of W at column 4 (t // 2) + "
                           "position t, in column order; a group with fewer than 2 non-zeros stores zeros too, "
                           "so every row has exactly K/2 values.") from None
    if not np.array_equal(metadata, expected_metadata):
        raise CheckFailure("metadata: the positions are right but the unused high nibble of the last "
                           "byte (K / 4 odd) must be 0")


@check(points=1)
def decompress(student, rng, hidden):
    """decompress(values, metadata, K) rebuilds the dense 2:4 matrix in values' dtype."""
    cases = []
    for W in _two_four_cases(rng, hidden):
        values, metadata = sparsity.compress(W)
        cases.append({"values": values, "metadata": metadata, "K": W.shape[1]})
    compare_cases(student, "decompress", cases, sparsity.decompress, returns="array", hidden=hidden, dtype="reference",
                  hint=lambda case, *_: _unpack_blamed(student, case, "decompress") or (
                      "Kept element t of a row goes to column 4 (t // 2) + its position, read from the metadata low "
                      "bits first; every other element is 0."))


def _unpack_blamed(student, case: dict, user: str) -> str:
    K = case.get("K") or 2 * case["values"].shape[1]
    arguments = {"metadata": case["metadata"], "K": K}
    return _blamed(student, "unpack_metadata", arguments, sparsity.unpack_metadata(**arguments), user)


def _matmul_hint(student, case, got, expected) -> str:
    if got.dtype != expected.dtype:
        return (f"Accumulate in {expected.dtype}: int64 for integer inputs, float32 for float16 and float32, "
                "float64 for float64 (Tensor Cores too add products in a wider type than the inputs).")
    if blamed := _unpack_blamed(student, case, "sparse_matmul"):
        return blamed
    values, B = case["values"], case["B"]
    A = sparsity.decompress(values, case["metadata"], 2 * values.shape[1])
    narrow = np.int32 if values.dtype.kind in "iu" else values.dtype  # an int32 or an input-format accumulator
    A, B = A.astype(narrow), B.astype(narrow)
    with np.errstate(over="ignore"):
        narrow_products = [A @ B, (A[:, :, None] * B[None]).sum(axis=1)]  # two orders of addition
    if any(np.array_equal(got, product.astype(got.dtype)) for product in narrow_products):
        return (f"That is the product accumulated in {np.dtype(narrow)} and widened afterwards: the overflow or "
                f"rounding has happened by then. Convert the inputs to {expected.dtype} before multiplying.")
    return ("Each kept value values[m, t] multiplies row 4 (t // 2) + position of B: the position alone is only "
            "the offset within its group of 4 rows.")


@check(points=2)
def sparse_matmul(student, rng, hidden):
    """sparse_matmul(values, metadata, B) equals the dense product of the pruned matrix, in the accumulator's dtype."""
    cases = []
    for W in _two_four_cases(rng, hidden):
        N = int(rng.integers(1, 6)) if hidden else 3
        B = _numbers(rng, (W.shape[1], N), W.dtype, spread=127 if W.dtype == np.int8 else 8)
        values, metadata = sparsity.compress(W)
        cases.append({"values": values, "metadata": metadata, "B": B})
    for W, B in EDGE_PRODUCTS if hidden else ():
        values, metadata = sparsity.compress(W)
        cases.append({"values": values, "metadata": metadata, "B": B})
    compare_cases(student, "sparse_matmul", cases, sparsity.sparse_matmul, returns="array", hidden=hidden,
                  dtype="reference", hint=lambda case, got, expected: _matmul_hint(student, case, got, expected))


@check(points=1)
def compressed_bytes(student, rng, hidden):
    """compressed_bytes(M, K, dtype) counts K/2 values and ceil(K/8) metadata bytes per row, as an integer."""
    cases = [{"M": 4096, "K": 4096, "dtype": "fp16"}, {"M": 3, "K": 12, "dtype": "int8"}]
    if hidden:
        dtypes = ["fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int4"]
        cases = [{"M": 1, "K": 4, "dtype": "int4"}, {"M": 5, "K": 20, "dtype": "bf16"}]
        cases += [{"M": int(rng.integers(1, 9000)), "K": 4 * int(rng.integers(1, 3000)), "dtype": dtype}
                  for dtype in dtypes]
    for i, case in enumerate(cases, 1):
        expected = sparsity.compressed_bytes(**case)
        try:
            got = student.call("compressed_bytes", returns="integer", **case)
        except CheckFailure as failure:
            raise CheckFailure(f"{_label(hidden, i, len(cases))}: {_call_text('compressed_bytes', case)}: {failure}") \
                from None
        try:
            assert_close(got, expected)
        except CheckFailure as failure:
            M, K = case["M"], case["K"]
            values = expected - M * sparsity.metadata_columns(K)
            sizes = unredacted(f"Expected {values} bytes of values (K/2 per row) + {M * sparsity.metadata_columns(K)} "
                               f"of metadata (ceil(K / 8) = {sparsity.metadata_columns(K)} bytes per row).",
                               "Expected the bytes of K/2 values per row + ceil(K / 8) bytes of metadata per row.")
            raise CheckFailure(
                f"{_label(hidden, i, len(cases))}: {_call_text('compressed_bytes', case)}: {failure}. {sizes}"
            ) from None
