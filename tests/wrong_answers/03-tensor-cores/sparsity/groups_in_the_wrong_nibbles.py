"""Puts group 2j in the high nibble of byte j and group 2j + 1 in the low one (and reads them back that way)."""

FAILS = ["metadata", "compress", "decompress", "sparse_matmul"]


def pack_metadata(indices):
    indices = indices.astype(np.uint8)  # noqa: F821
    nibbles = indices[:, 0::2] | (indices[:, 1::2] << 2)
    if nibbles.shape[1] % 2:
        nibbles = np.pad(nibbles, ((0, 0), (0, 1)))  # noqa: F821
    return ((nibbles[:, 0::2] << 4) | nibbles[:, 1::2]).astype(np.uint8)  # noqa: F821


def unpack_metadata(metadata, K):
    M = metadata.shape[0]
    nibbles = np.stack([metadata >> 4, metadata & 0xF], axis=-1).reshape(M, -1)[:, :K // 4]  # noqa: F821
    return np.stack([nibbles & 0b11, nibbles >> 2], axis=-1).reshape(M, K // 2).astype(np.int64)  # noqa: F821
