"""INT4 weights as GPTQ and AWQ store them: 4-bit codes packed 8 to an int32 word, with a scale and zero per group.

Conventions, all stated because the libraries differ on each:
- codes are UNSIGNED, q in [0, 15] (GPTQ's and AWQ's convention). aisys.quant.affine's asymmetric 4-bit codes are
  signed, in [-8, 7]; adding 8 to both the code and the zero point gives these (q + 8) - (z + 8) = q - z, the same
  weight (`from_signed`).
- a weight matrix W is (N, K): N outputs, K inputs, y = x @ W.T as torch.nn.Linear stores it. Codes are packed
  along K, the input dimension, 8 consecutive codes per int32 word: packed is (N, K // 8) int32, each row's words
  contiguous, which is what a GEMV streams. (GPTQ also packs along K but stores the transpose, (K // 8, N); AWQ's
  GEMM packs along N, (K, N // 8): the same word, another axis.)
- two nibble orders. "sequential" (GPTQ): element i of a word's 8 sits at bits 4i..4i+3. "awq": the nibble at bits
  4i holds element AWQ_ORDER[i], so elements 0, 1 sit at bits 0 and 16, elements 2, 3 at bits 4 and 20, ...
  (AutoAWQ, awq/modules/linear/gemm.py, `WQLinear_GEMM.from_linear`'s order_map, and awq/utils/packing_utils.py's
  AWQ_ORDER / AWQ_REVERSE_ORDER): one shift then brings a PAIR of consecutive elements to bits 0 and 16, the two
  halves of a register that FasterTransformer's lop3 trick turns into two fp16 at once.
- the word is an int32: a code >= 8 in the top nibble makes it negative. Unpacking shifts and then masks with 0xF
  (an arithmetic shift of a negative word fills with ones).
- one fp16 scale and one 4-bit zero point per group of `group_size` consecutive inputs along K (per output row):
  scales and zeros are (N, K // group_size); w = (q - z) * s, as AWQ's and GPTQ's kernels compute it (the
  subtraction before the scaling, exact in integers).
"""

import numpy as np

from . import affine
from .._validate import one_of, positive_int

BITS = 4
PACK = 32 // BITS  # codes per int32 word
QMAX = 2**BITS - 1  # 15
OFFSET = 2 ** (BITS - 1)  # 8: affine's signed 4-bit codes [-8, 7] plus 8 are these [0, 15]
ORDERS = ("sequential", "awq")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # the element whose nibble sits at bits 4i (AutoAWQ's order_map)
AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)  # the nibble position of element j: its inverse


def positions(order: str) -> np.ndarray:
    """The nibble position (bits 4p .. 4p + 3) of element j of a word's 8, for j = 0..7."""
    one_of("order", order, ORDERS)
    return np.array(AWQ_REVERSE_ORDER if order == "awq" else range(PACK), dtype=np.int64)


def _codes(q) -> np.ndarray:
    q = np.asarray(q)
    if q.dtype.kind not in "iu":
        raise ValueError(f"q must be an array of integer codes, got {q.dtype}")
    if q.ndim == 0:
        raise ValueError("q must have at least one dimension (K, the last), got a scalar")
    if q.size and (q.min() < 0 or q.max() > QMAX):
        raise ValueError(f"q must hold 4-bit codes in [0, {QMAX}], got values in [{q.min()}, {q.max()}]")
    if q.shape[-1] % PACK:
        raise ValueError(f"K (q's last dimension) must be a multiple of {PACK} to pack {PACK} codes per int32 "
                         f"word, got K = {q.shape[-1]}")
    return q


def pack(q, order: str = "sequential") -> np.ndarray:
    """Codes q (..., K) in [0, 15] packed 8 per int32 word along K: (..., K // 8) int32, in `order`."""
    q = _codes(q).astype(np.int64)
    shifts = BITS * positions(order)
    groups = q.reshape(*q.shape[:-1], q.shape[-1] // PACK, PACK)
    words = (groups << shifts).sum(axis=-1)  # disjoint bits: a sum is an OR
    return words.astype(np.uint32).view(np.int32)  # bit 31 becomes the sign: two's complement, no overflow


def unpack(packed, order: str = "sequential") -> np.ndarray:
    """int32 words (..., K // 8) back to codes (..., K) uint8 in [0, 15]: shift, then mask (the shift is arithmetic:
    a negative word's top nibble comes out with ones above it)."""
    packed = np.asarray(packed)
    if packed.dtype != np.int32:
        raise ValueError(f"packed must be an int32 array of words, got {packed.dtype}")
    if packed.ndim == 0:
        raise ValueError("packed must have at least one dimension, got a scalar")
    shifts = BITS * positions(order)
    codes = (packed[..., None] >> shifts) & QMAX
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * PACK).astype(np.uint8)


def pack_bytes(q) -> np.ndarray:
    """Codes q (..., K) in [0, 15], K even, two per byte, the low nibble first: (..., K // 2) uint8 (as llama.cpp's
    Q4 blocks and bitsandbytes store them). Bytes have no sign bit to trip over."""
    q = np.asarray(q)
    if q.dtype.kind not in "iu" or (q.size and (q.min() < 0 or q.max() > QMAX)):
        raise ValueError(f"q must hold integer codes in [0, {QMAX}]")
    if q.ndim == 0 or q.shape[-1] % 2:
        raise ValueError(f"K (q's last dimension) must be even to pack two codes per byte, got shape {q.shape}")
    q = q.astype(np.uint8)
    return q[..., 0::2] | (q[..., 1::2] << 4)


def unpack_bytes(packed) -> np.ndarray:
    """uint8 bytes (..., K // 2) back to codes (..., K) uint8, the low nibble first."""
    packed = np.asarray(packed)
    if packed.dtype != np.uint8:
        raise ValueError(f"packed must be a uint8 array, got {packed.dtype}")
    return np.stack([packed & QMAX, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)


def from_signed(q, zero_point) -> tuple[np.ndarray, np.ndarray]:
    """aisys.quant.affine's asymmetric 4-bit codes and zero points (signed, [-8, 7]) as unsigned [0, 15] ones (+8)."""
    q, zero_point = np.asarray(q), np.asarray(zero_point)
    for name, value in (("q", q), ("zero_point", zero_point)):
        if value.dtype.kind not in "iu" or (value.size and (value.min() < -OFFSET or value.max() > OFFSET - 1)):
            raise ValueError(f"{name} must hold signed 4-bit integers in [{-OFFSET}, {OFFSET - 1}]")
    return (q.astype(np.int16) + OFFSET).astype(np.uint8), (zero_point.astype(np.int16) + OFFSET).astype(np.uint8)


def quantize(w, group_size: int = 128) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """W (N, K) float to (codes (N, K) uint8 in [0, 15], scales (N, K // G) float16, zeros (N, K // G) uint8):
    asymmetric min-max round-to-nearest per group of G inputs (affine.choose_qparams), the scale rounded to fp16
    (what is stored) before the codes are computed with it."""
    w = np.asarray(w)
    if w.ndim != 2:
        raise ValueError(f"w must be a 2-D (N, K) weight matrix, got shape {w.shape}")
    group_size = positive_int("group_size", group_size)
    scale, zero = affine.choose_qparams(w, bits=BITS, symmetric=False, granularity="group", group_size=group_size)
    scale16 = np.maximum(scale, np.finfo(np.float16).tiny).astype(np.float16)  # fp16's smallest normal number
    q = affine.quantize(w, scale16.astype(np.float32), zero, bits=BITS, symmetric=False)
    q, zero = from_signed(q, zero)
    return q, scale16, zero


def _groups(q, scales, zeros) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    q, scales, zeros = np.asarray(q), np.asarray(scales), np.asarray(zeros)
    if q.ndim != 2 or q.dtype.kind not in "iu":
        raise ValueError(f"q must be a 2-D (N, K) array of integer codes, got {q.dtype} of shape {q.shape}")
    if scales.dtype != np.float16 or scales.ndim != 2 or scales.shape[0] != q.shape[0] or scales.shape[1] == 0 \
            or q.shape[1] % scales.shape[1]:
        raise ValueError(f"scales must be float16 of shape (N, K // group_size) for q of shape {q.shape}, got "
                         f"{scales.dtype} of shape {scales.shape}")
    if zeros.shape != scales.shape or zeros.dtype.kind not in "iu" or (zeros.min() < 0 or zeros.max() > QMAX):
        raise ValueError(f"zeros must hold integers in [0, {QMAX}] of shape {scales.shape}, got {zeros.dtype} of "
                         f"shape {zeros.shape}")
    return q, scales, zeros, q.shape[1] // scales.shape[1]


def dequantize(q, scales, zeros) -> np.ndarray:
    """W (N, K) float32 = (q - z) * s per group of G = K // scales.shape[1] inputs: exact (a 5-bit integer times an
    fp16 scale fits float32's 24-bit significand)."""
    q, scales, zeros, group_size = _groups(q, scales, zeros)
    centred = q.astype(np.int32) - np.repeat(zeros.astype(np.int32), group_size, axis=1)  # first, in integers
    return centred.astype(np.float32) * np.repeat(scales.astype(np.float32), group_size, axis=1)


def gemv(x, packed, scales, zeros, order: str = "sequential") -> np.ndarray:
    """y (M, N) = x (M, K) @ W.T in float64, W dequantized from packed (N, K // 8) int32 words in `order`."""
    x = np.asarray(x)
    if x.ndim != 2 or x.dtype.kind != "f":
        raise ValueError(f"x must be a 2-D (M, K) float array, got {x.dtype} of shape {x.shape}")
    w = dequantize(unpack(packed, order), scales, zeros)
    if w.shape[1] != x.shape[1]:
        raise ValueError(f"x has K = {x.shape[1]} inputs, the packed weights {w.shape[1]}")
    return x.astype(np.float64) @ w.astype(np.float64).T


def bits_per_weight(group_size: int = 128, bits: int = BITS, scale_bits: int = 16, zero_bits: int = BITS) -> float:
    """Stored bits per weight: the code plus its group's scale and zero point shared by group_size weights."""
    group_size, bits = positive_int("group_size", group_size), positive_int("bits", bits)
    return bits + (positive_int("scale_bits", scale_bits) + positive_int("zero_bits", zero_bits)) / group_size


def w4a16_bytes(M: int, N: int, K: int, group_size: int = 128, activation_bytes: int = 2) -> float:
    """Bytes a W4A16 GEMV moves at least: packed codes, fp16 scales, 4-bit zeros (packed), x (M, K) and y (M, N)."""
    M, N, K = positive_int("M", M), positive_int("N", N), positive_int("K", K)
    weights = N * K * bits_per_weight(group_size) / 8
    return weights + (M * K + M * N) * positive_int("activation_bytes", activation_bytes)


def gemv_speedup_bound(M: int, N: int, K: int, group_size: int = 128) -> float:
    """How much faster a memory-bound W4A16 GEMV can be than the fp16 one: the ratio of the bytes they move."""
    fp16 = (N * K + M * K + M * N) * 2
    return fp16 / w4a16_bytes(M, N, K, group_size)
