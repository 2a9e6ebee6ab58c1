"""Gathers row `position` of B for every kept value, forgetting the group's first row 4 (t // 2)."""

FAILS = ["sparse_matmul"]


def sparse_matmul(values, metadata, B):
    K = 2 * values.shape[1]
    rows_of_B = B[unpack_metadata(metadata, K)]  # noqa: F821
    accumulator = np.int64 if values.dtype.kind in "iu" else np.result_type(np.float32, values.dtype)  # noqa: F821
    return np.einsum("mt,mtn->mn", values.astype(accumulator), rows_of_B.astype(accumulator))  # noqa: F821
