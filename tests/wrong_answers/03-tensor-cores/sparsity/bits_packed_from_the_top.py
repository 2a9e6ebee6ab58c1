"""Packs the 2-bit fields from the most significant end of each byte, as one writes binary left to right."""

FAILS = ["metadata", "compress", "decompress", "sparse_matmul"]


def pack_metadata(indices):
    M, kept = indices.shape
    fields = np.zeros((M, -(-kept // 4) * 4), dtype=np.uint8)  # noqa: F821
    fields[:, :kept] = indices
    fields = fields.reshape(M, -1, 4)
    packed = fields[..., 0] << 6 | fields[..., 1] << 4 | fields[..., 2] << 2 | fields[..., 3]
    return packed.astype(np.uint8)  # noqa: F821


def unpack_metadata(metadata, K):
    fields = np.stack([metadata >> 6, (metadata >> 4) & 3, (metadata >> 2) & 3, metadata & 3], axis=-1)  # noqa: F821
    return fields.reshape(metadata.shape[0], -1)[:, :K // 2].astype(np.int64)  # noqa: F821
