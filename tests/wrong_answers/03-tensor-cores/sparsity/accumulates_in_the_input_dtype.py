"""Multiplies and sums in the inputs' dtype: int8 products wrap around, float16 sums lose bits."""

FAILS = ["sparse_matmul"]


def sparse_matmul(values, metadata, B):
    K = 2 * values.shape[1]
    columns = 4 * (np.arange(K // 2) // 2) + unpack_metadata(metadata, K)  # noqa: F821
    return np.einsum("mt,mtn->mn", values, B[columns])  # noqa: F821
