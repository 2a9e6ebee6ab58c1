"""INT8 GEMM: int8 x int8 products summed exactly in int32, then requantized to int8 or dequantized to float32.

The layout is the one of a linear layer y = x W^T computed as C = A B: A (M, K) holds M tokens' activations,
B (K, N) the weight's N output channels as columns. One scale per token of A ("per token", a_scale of shape
(M, 1)) and one per output channel of B ("per channel", b_scale of shape (1, N)) factor out of the sum over K:

    C_real[m, n] = sum_k (a_scale[m] (A[m, k] - a_zero_point[m])) (b_scale[n] B[k, n])
                 = a_scale[m] b_scale[n] (sum_k A[m, k] B[k, n] - a_zero_point[m] sum_k B[k, n])

so the whole sum runs on integers and the scales touch each output once (Jacob et al. 2018, sec. 2.3; the
weights are symmetric, zero point 0, so of the four terms of their eq. 7 only the activation's zero point times
the column sums of B is left, and it costs one int32 vector per weight).

Conventions, stated because libraries differ on each:
- int8_matmul accumulates exactly: every product of two int8 codes is at most 128 x 128 = 2**14 in size, so a sum
  of K of them fits int32 (|sum| <= 2**31 - 1) for K <= MAX_K = (2**31 - 1) // 2**14 = 131071 (K < 2**17); with
  an activation zero point, |A - a_zero_point| <= 255 and the bound is (2**31 - 1) // (255 * 128) = 65793. A
  larger K is refused (ValueError): a GEMM that long must split K and sum the pieces wider.
- requantize is float64 arithmetic in one stated order, then one rounding (round half to even, as numpy's
  np.round and IEEE's default), then the zero point, then a clamp to [-128, 127]:
      q = clamp(round_half_even((acc + bias) * (a_scale * b_scale) / out_scale) + out_zero_point, -128, 127)
  acc + bias is exact in float64 (|value| < 2**53), a_scale * b_scale is exact too (float32 x float32 has 48
  significant bits), so the only roundings are the product with acc and the division, each correctly rounded;
  a GPU's float64 multiply and divide round the same way, so a kernel can match it bit for bit. The bias is int32
  in units of a_scale * b_scale (gemmlowp's and TFLite's convention), added before scaling.
- integer-only hardware cannot multiply by a float: it stores the real multiplier a_scale b_scale / out_scale
  (in (0, 1)) as an int32 M0 in [2**30, 2**31) and a right shift, multiplier = M0 2**-31 2**-shift, and computes
  a rounding "doubling high multiply" then a rounding right shift (gemmlowp's SaturatingRoundingDoublingHighMul
  and RoundingDivideByPOT; Jacob et al. 2018, sec. 2.2). `quantize_multiplier` and `requantize_fixed_point` do
  exactly that, as gemmlowp writes it: both round to nearest; on an exact half the shift rounds away from zero
  and the multiply-high rounds a negative half toward zero (its nudge, then C's truncating division). With those
  ties and the 31 bits of M0, its codes can differ from `requantize`'s by one (counted on the book's page).
- dequantize_acc is float32 arithmetic in one stated order: float32(acc) * a_scale * b_scale (+ bias), each step
  rounded to float32; float32(acc) itself rounds once |acc| > 2**24.
"""

import numpy as np

from . import affine

INT32_MAX = 2**31 - 1
MAX_K = INT32_MAX // (128 * 128)  # 131071: K < 2**17 int8 x int8 products always fit int32
MAX_K_WITH_ZERO_POINT = INT32_MAX // (255 * 128)  # 65793: |A - a_zero_point| reaches 255


def max_k(zero_point: bool = False) -> int:
    """The longest K whose int8 x int8 sums always fit int32, for the worst codes (with an activation zero point:
    |A - zero_point| up to 255)."""
    return MAX_K_WITH_ZERO_POINT if zero_point else MAX_K


def _int8_matrix(name: str, x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.int8 or x.ndim != 2 or x.size == 0:
        raise ValueError(f"{name} must be a non-empty 2-D int8 array, got {x.dtype} of shape {x.shape}")
    return x


def _zero_point(a_zero_point, m: int) -> np.ndarray:
    """The activation zero point as an int64 column (M, 1): from an int or an (M, 1) array of ints in [-128, 127]."""
    zp = np.asarray(a_zero_point)
    if zp.dtype.kind not in "iu" or zp.shape not in ((), (1, 1), (m, 1)) or ((zp < -128) | (zp > 127)).any():
        raise ValueError(f"a_zero_point must be an int or an ({m}, 1) array of ints in [-128, 127], got "
                         f"{zp.dtype} of shape {zp.shape}")
    return np.broadcast_to(zp.astype(np.int64).reshape(-1, 1) if zp.ndim else zp.astype(np.int64), (m, 1))


def int8_matmul(a, b, a_zero_point=0) -> np.ndarray:
    """(A - a_zero_point) @ B exactly, as int32: A int8 (M, K), B int8 (K, N), a_zero_point an int or (M, 1).

    Computed as A @ B - a_zero_point * (column sums of B), Jacob et al.'s cross term: the sums are done here in
    int64 and are exact; the bound on K (module docstring) makes them fit int32, which the result is."""
    a, b = _int8_matrix("a", a), _int8_matrix("b", b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {a.shape} (K = {a.shape[1]}), b is {b.shape} "
                         f"(K = {b.shape[0]})")
    zp = _zero_point(a_zero_point, a.shape[0])
    K = a.shape[1]
    limit = max_k(bool(zp.any()))
    if K > limit:
        raise ValueError(f"K = {K} is too long for an int32 accumulator: int8 products sum exactly in int32 only "
                         f"for K <= {limit}; split K and add the pieces in int64")
    exact = a.astype(np.int64) @ b.astype(np.int64) - zp * b.astype(np.int64).sum(axis=0, keepdims=True)
    return exact.astype(np.int32)


def _accumulator(acc) -> np.ndarray:
    acc = np.asarray(acc)
    if acc.dtype != np.int32 or acc.ndim != 2:
        raise ValueError(f"acc must be a 2-D int32 array (the accumulator), got {acc.dtype} of shape {acc.shape}")
    return acc


def _scale(name: str, value, shape: tuple[int, int], what: str) -> np.ndarray:
    """A float32 scale, a scalar or of `shape`, finite and > 0, as float64 of a shape that broadcasts."""
    s = np.asarray(value)
    if s.dtype != np.float32 or s.shape not in ((), (1, 1), shape) or not (np.isfinite(s) & (s > 0)).all():
        raise ValueError(f"{name} must be float32, finite and > 0, a scalar or {what} of shape {shape}; got "
                         f"{s.dtype} of shape {s.shape}")
    return s.astype(np.float64)


def _scales(acc: np.ndarray, a_scale, b_scale) -> tuple[np.ndarray, np.ndarray]:
    m, n = acc.shape
    return (_scale("a_scale", a_scale, (m, 1), "one per token (row of A)"),
            _scale("b_scale", b_scale, (1, n), "one per output channel (column of B)"))


def _bias(bias, n: int, dtype) -> np.ndarray:
    if bias is None:
        return np.zeros((1, n), dtype)
    bias = np.asarray(bias)
    if bias.dtype != dtype or bias.shape not in ((n,), (1, n)):
        raise ValueError(f"bias must be {np.dtype(dtype).name} of shape ({n},) or (1, {n}), one per output channel; "
                         f"got {bias.dtype} of shape {bias.shape}")
    return bias.reshape(1, n)


def requantize(acc, a_scale, b_scale, out_scale, out_zero_point, bias=None) -> np.ndarray:
    """int8 codes of the output: clamp(round_half_even((acc + bias) * (a_scale * b_scale) / out_scale)
    + out_zero_point, -128, 127), in float64 (module docstring). a_scale scalar or (M, 1), b_scale scalar or
    (1, N), out_scale a float32 scalar, out_zero_point an int in [-128, 127], bias int32 (N,) or None."""
    acc = _accumulator(acc)
    sa, sb = _scales(acc, a_scale, b_scale)
    so = _scale("out_scale", out_scale, (), "")
    zp = np.asarray(out_zero_point)
    if zp.shape != () or zp.dtype.kind not in "iu" or not -128 <= int(zp) <= 127:
        raise ValueError(f"out_zero_point must be an int in [-128, 127], got {out_zero_point!r}")
    total = acc.astype(np.float64) + _bias(bias, acc.shape[1], np.int32).astype(np.float64)
    codes = np.round(total * (sa * sb) / so) + int(zp)
    return np.clip(codes, -128, 127).astype(np.int8)


def dequantize_acc(acc, a_scale, b_scale, bias=None) -> np.ndarray:
    """The layer's float32 output: float32(acc) * a_scale * b_scale (+ bias), left to right, each step in float32.
    a_scale scalar or (M, 1), b_scale scalar or (1, N), bias float32 (N,) or None."""
    acc = _accumulator(acc)
    _scales(acc, a_scale, b_scale)  # validated; used as float32
    out = acc.astype(np.float32) * np.asarray(a_scale, np.float32) * np.asarray(b_scale, np.float32)
    return out if bias is None else out + _bias(bias, acc.shape[1], np.float32)


def w8a8_linear(x, weight, bias=None) -> np.ndarray:
    """y = x W^T + bias through int8: x (M, K) float quantized per token, W (N, K) per output channel, both
    symmetric (aisys.quant.affine), multiplied in int32 and dequantized to float32."""
    x = np.asarray(x)
    weight = np.asarray(weight)
    if x.ndim != 2 or weight.ndim != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"x must be (M, K) and weight (N, K) with one K, got {x.shape} and {weight.shape}")
    x_scale, x_zp = affine.choose_qparams(x, granularity="token")  # (M, 1)
    w_scale, w_zp = affine.choose_qparams(weight, granularity="channel")  # (N, 1)
    xq = affine.quantize(x, x_scale, x_zp)
    wq = affine.quantize(weight, w_scale, w_zp)
    return dequantize_acc(int8_matmul(xq, np.ascontiguousarray(wq.T)), x_scale, w_scale.T,
                          None if bias is None else np.asarray(bias, np.float32))


# ---------------------------------------------------------------- integer-only requantization (gemmlowp)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(M0, shift) with real ~= M0 * 2**-31 * 2**-shift, M0 an int32 in [2**30, 2**31), for 0 < real < 1
    (gemmlowp's QuantizeMultiplierSmallerThanOne: M0 is real * 2**(31 + shift) rounded to nearest)."""
    real = float(real)
    if not 0 < real < 1:
        raise ValueError(f"real must be a multiplier in (0, 1), got {real!r}")
    mantissa, exponent = np.frexp(real)  # real = mantissa * 2**exponent, mantissa in [0.5, 1)
    m0 = int(round(mantissa * 2**31))
    shift = -int(exponent)
    if m0 == 2**31:  # the mantissa rounded up to 1.0
        m0, shift = m0 // 2, shift - 1
    return m0, shift


def _rounding_doubling_high_mul(a: np.ndarray, m0: int) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul: a * m0 / 2**31 to nearest in int64, as gemmlowp writes it: a nudge
    of 2**30 (1 - 2**30 for a negative product), then a division truncating toward zero; a positive half goes up, a
    negative half toward zero. (Its one saturating case, a = m0 = -2**31, cannot occur: m0 > 0.)"""
    product = a.astype(np.int64) * m0
    nudge = np.where(product >= 0, 1 << 30, 1 - (1 << 30))
    # C's integer division truncates toward zero; numpy's // floors: divide magnitudes
    total = product + nudge
    return np.sign(total) * (np.abs(total) // 2**31)


def _rounding_divide_by_pot(x: np.ndarray, shift: int) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT: x / 2**shift rounded to nearest, ties away from zero."""
    if shift == 0:
        return x
    mask = (1 << shift) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> shift) + (remainder > threshold)


def requantize_fixed_point(acc, multiplier: float, out_zero_point: int) -> np.ndarray:
    """int8 codes as integer-only hardware computes them (gemmlowp, TFLite): the real multiplier (one per tensor)
    as (M0, shift), a rounding doubling high multiply, a rounding right shift, the zero point, a clamp."""
    acc = _accumulator(acc)
    if isinstance(out_zero_point, bool) or not isinstance(out_zero_point, (int, np.integer)) \
            or not -128 <= out_zero_point <= 127:
        raise ValueError(f"out_zero_point must be an int in [-128, 127], got {out_zero_point!r}")
    m0, shift = quantize_multiplier(multiplier)
    scaled = _rounding_divide_by_pot(_rounding_doubling_high_mul(acc, m0), shift)
    return np.clip(scaled + int(out_zero_point), -128, 127).astype(np.int8)
