"""LayerNorm and RMSNorm forward in Triton: one program per row, statistics in float32.

LayerNorm normalises each row of x (M x N) by its own mean and *biased*
variance (divide by N, as torch does for normalisation), then scales and
shifts every column:

    mean = sum(x) / N                       var = sum((x - mean)^2) / N
    rstd = 1 / sqrt(var + eps)              y   = (x - mean) * rstd * weight + bias

RMSNorm skips the mean and the bias: y = x / sqrt(mean(x^2) + eps) * weight.

The variance is never computed as E[x^2] - E[x]^2, which is exact in real
numbers and useless in float32 when the mean is large against the spread: for
rows around 1e4 with unit variance, E[x^2] is about 1e8, where float32's
spacing is 8, so the difference of two such numbers says nothing about a
variance of 1. Only distances from a mean are squared: from the row's mean,
computed first (two passes), or from a running mean updated element by
element (Welford's one pass). eps goes inside the square root: a constant row
has variance 0, and 1 / sqrt(0 + eps) times a zero distance gives the bias;
1 / sqrt(0) would give 0 * inf = NaN.

Whatever the dtype of x (float32, float16, bfloat16), loads are converted to
float32, the arithmetic is float32, and only the store rounds to x's dtype: a
row of 4096 float16 values summed in float16 would lose most of its digits.

Two kernels per norm. When the whole row fits in one block (N elements of at
most MAX_FUSED_BYTES), `layer_norm_row_kernel` and `rms_norm_row_kernel` load
it once into registers and compute the mean, the squared distances from it
and y there: one read of x and one write of y, the least traffic a LayerNorm
can have. A longer row does not fit: `layer_norm_kernel` and
`rms_norm_kernel` loop over it in blocks of BLOCK columns, reading it twice,
once for the statistics (for LayerNorm, Welford's update in each lane, the
lanes merged at the end) and once for y. The host functions pick the kernel;
`block=` forces the looping one.

For rows too long for one block, `layer_norm` and `rms_norm` run by default (`tuned=True`) the autotuned
looping kernels `layer_norm_tuned_kernel` and `rms_norm_tuned_kernel` instead: the column block, the warps,
eviction hints that keep the row in L2 between its two reads, and 1 to 4 programs per SM taking rows in turn
(LayerNorm's statistics merged block by block by Chan's formula). A row that fits one block still takes the row
kernel, which reads it once: no tuning of a loop can beat the least traffic. `tuned=False` runs the readable
kernels above whatever the row length.
"""

import torch
import triton
import triton.language as tl

from ._tensors import float_tensor, interpreted

MAX_FUSED_BYTES = 65536  # a row up to this size is held in registers by one program (16384 float32 values)
LOOP_BLOCK = 4096  # columns per step of the looping kernels, for rows longer than that


# LayerNorm ----------------------------------------------------------------------------------------------------------

@triton.jit
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride_x, stride_y, N, eps, BLOCK: tl.constexpr):
    """y[row] = (x[row] - mean) / sqrt(var + eps) * w + b for the row of this program, BLOCK columns at a time.

    Two reads of the row: one for both statistics (Welford), one for y. Three passes (the mean, then the
    variance about it, then y) are simpler, but the third read of a long row misses the cache.
    """
    row = tl.program_id(0).to(tl.int64)  # row * stride overflows int32 past 2**31 elements
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y

    # Pass 1: Welford's update in each lane. Lane j sees columns j, j + BLOCK, j + 2 BLOCK, ... and keeps their
    # count, mean and sum of squared distances from that mean (m2). Padded columns leave a lane unchanged.
    count = tl.zeros([BLOCK], dtype=tl.float32)
    lane_mean = tl.zeros([BLOCK], dtype=tl.float32)
    m2 = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        count += tl.where(mask, 1.0, 0.0)
        delta = tl.where(mask, x - lane_mean, 0.0)
        lane_mean += delta / tl.maximum(count, 1.0)
        m2 += delta * tl.where(mask, x - lane_mean, 0.0)
    # The lanes merged (Chan, Golub and LeVeque): the row's m2 is the lanes' m2 plus each lane's count times the
    # squared distance of its mean from the row's. Only distances are squared: no E[x^2] - E[x]^2.
    mean = tl.sum(count * lane_mean, axis=0) / N
    spread = lane_mean - mean
    var = (tl.sum(m2, axis=0) + tl.sum(count * spread * spread, axis=0)) / N
    rstd = 1.0 / tl.sqrt(var + eps)

    # Pass 2: normalise, scale and shift.
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_row_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride_x, stride_y, N, eps, BLOCK: tl.constexpr):
    """layer_norm_kernel for rows of at most BLOCK columns: the row is read once and stays in registers."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (d * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


# RMSNorm ------------------------------------------------------------------------------------------------------------

@triton.jit
def rms_norm_kernel(x_ptr, y_ptr, w_ptr, stride_x, stride_y, N, eps, BLOCK: tl.constexpr):
    """y[row] = x[row] / sqrt(mean(x[row]^2) + eps) * w for the row of this program, BLOCK columns at a time."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y

    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)  # padding adds 0^2 = 0
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)

    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rms_norm_row_kernel(x_ptr, y_ptr, w_ptr, stride_x, stride_y, N, eps, BLOCK: tl.constexpr):
    """rms_norm_kernel for rows of at most BLOCK columns: the row is read once and stays in registers."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


# Tuned long-row kernels -----------------------------------------------------------------------------------------------

def _tuned_config(block, warps, evict, per_sm):
    return triton.Config({"BLOCK": block, "EVICT": evict, "PER_SM": per_sm}, num_warps=warps)


# (BLOCK, num_warps, eviction hints, programs per SM: 0 = one program per row). The untuned looping kernel's
# choice (4096 columns, 8 warps, no hints, a program per row) is among them, so the autotuner can only keep or beat
# it; the others trade programs in flight (L2 reuse of the second read) against loads in flight. The first is the
# one the GPU tests pin (tests/conftest.py, AISYS_PIN_AUTOTUNE): hints and programs taking several rows, the two
# paths the untuned kernel lacks.
TUNED_GPU_CONFIGS = [
    _tuned_config(4096, 16, True, 1), _tuned_config(4096, 8, False, 0), _tuned_config(4096, 8, True, 0),
    _tuned_config(8192, 16, True, 0), _tuned_config(8192, 16, True, 1), _tuned_config(8192, 32, True, 1),
    _tuned_config(16384, 32, True, 1), _tuned_config(4096, 8, True, 2), _tuned_config(4096, 16, True, 2),
    _tuned_config(2048, 8, True, 4),
]
TUNED_INTERPRETER_CONFIGS = [_tuned_config(256, 4, True, 1)]  # small blocks: the tests' rows still take several


@triton.jit
def _load_row_block(ptr, cols, mask, FIRST: tl.constexpr, EVICT: tl.constexpr):
    """x[cols] in float32; with EVICT, kept in L2 on the first read (for the second) and let go on the second."""
    if EVICT:
        if FIRST:
            x = tl.load(ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last")
        else:
            x = tl.load(ptr + cols, mask=mask, other=0.0, eviction_policy="evict_first")
    else:
        x = tl.load(ptr + cols, mask=mask, other=0.0)
    return x.to(tl.float32)


@triton.autotune(configs=TUNED_INTERPRETER_CONFIGS if interpreted() else TUNED_GPU_CONFIGS, key=["N"])
@triton.jit
def layer_norm_tuned_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride_x, stride_y, M, N, eps,
                            BLOCK: tl.constexpr, EVICT: tl.constexpr, PER_SM: tl.constexpr):
    """layer_norm_kernel, each program taking rows program_id, + num_programs, ...; per-block statistics merged.

    Block j of the row gives its count n_j, mean and m2_j (squared distances from its own mean); the running
    (n, mean, m2) takes it in by Chan, Golub and LeVeque: delta = mean_j - mean, n' = n + n_j,
    mean' = mean + delta n_j / n', m2' = m2 + m2_j + delta^2 n n_j / n'. Only distances are squared."""
    for row in range(tl.program_id(0), M, tl.num_programs(0)):
        row64 = tl.zeros([], tl.int64) + row  # int64 (row * stride passes 2**31); the interpreter's row is an int
        x_row = x_ptr + row64 * stride_x
        y_row = y_ptr + row64 * stride_y
        n = tl.zeros([], tl.float32)
        mean = tl.zeros([], tl.float32)
        m2 = tl.zeros([], tl.float32)
        for start in range(0, N, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < N
            x = _load_row_block(x_row, cols, mask, True, EVICT)
            n_j = tl.minimum(N - start, BLOCK).to(tl.float32)
            mean_j = tl.sum(x, axis=0) / n_j
            d = tl.where(mask, x - mean_j, 0.0)
            m2_j = tl.sum(d * d, axis=0)
            total = n + n_j
            delta = mean_j - mean
            mean += delta * (n_j / total)
            m2 += m2_j + delta * delta * (n * n_j / total)
            n = total
        rstd = 1.0 / tl.sqrt(m2 / N + eps)
        for start in range(0, N, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < N
            x = _load_row_block(x_row, cols, mask, False, EVICT)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.autotune(configs=TUNED_INTERPRETER_CONFIGS if interpreted() else TUNED_GPU_CONFIGS, key=["N"])
@triton.jit
def rms_norm_tuned_kernel(x_ptr, y_ptr, w_ptr, stride_x, stride_y, M, N, eps,
                          BLOCK: tl.constexpr, EVICT: tl.constexpr, PER_SM: tl.constexpr):
    """rms_norm_kernel, each program taking rows program_id, + num_programs, ..., with eviction hints."""
    for row in range(tl.program_id(0), M, tl.num_programs(0)):
        row64 = tl.zeros([], tl.int64) + row  # int64 (row * stride passes 2**31); the interpreter's row is an int
        x_row = x_ptr + row64 * stride_x
        y_row = y_ptr + row64 * stride_y
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, N, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = _load_row_block(x_row, cols, cols < N, True, EVICT)  # padding adds 0^2 = 0
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        for start in range(0, N, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < N
            x = _load_row_block(x_row, cols, mask, False, EVICT)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def _tuned_grid(M: int, dev: torch.device):
    """Grid of the tuned kernels: a program per row (PER_SM = 0), or PER_SM programs per SM taking rows in turn.

    The interpreter counts 2 SMs, so that the tests' few rows already make programs take several rows."""
    sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 2

    def grid(meta):
        return (M if meta["PER_SM"] == 0 else min(M, meta["PER_SM"] * sms),)
    return grid


# Host side ----------------------------------------------------------------------------------------------------------

def launch_config(N: int, element_size: int, block: int | None = None) -> tuple[str, int, int]:
    """(kernel kind, BLOCK, num_warps) for rows of N elements: 'row' when one block holds the row, else 'loop'.

    `block` forces the looping kernel with that many columns per step (a power of two).
    """
    if block is None and N * element_size <= MAX_FUSED_BYTES:
        kind, block = "row", triton.next_power_of_2(N)
    else:
        kind, block = "loop", LOOP_BLOCK if block is None else block
    return kind, block, num_warps(block)


def num_warps(block: int) -> int:
    """Warps for a program holding `block` values: at most 32 per thread, so that long rows do not spill registers."""
    if block >= 32768:
        return 32  # 1024 threads, the most a program can have
    if block >= 8192:
        return 16
    if block >= 2048:
        return 8
    return max(1, min(4, block // 128))


def _check_inputs(x, params: dict, eps, block) -> tuple[torch.Tensor, dict]:
    """x as a contiguous (M, N) tensor and each parameter as a contiguous (N,) tensor of x's dtype."""
    x = float_tensor("x", x, 2)  # (M, N)
    N = x.shape[1]
    if N < 1:
        raise ValueError(f"x must have at least one column, got shape {tuple(x.shape)}")
    for name, value in params.items():
        value = params[name] = float_tensor(name, value, 1)
        if value.shape[0] != N:
            raise ValueError(f"{name} must have shape ({N},), one value per column of x; got {tuple(value.shape)}")
        if value.dtype != x.dtype:
            raise ValueError(f"{name} must have x's dtype {x.dtype}, got {value.dtype}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block < 1
                              or block & (block - 1)):
        raise ValueError(f"block must be a power of two (columns per step), got {block!r}")
    return x, params


def _check_tuned(tuned, block) -> None:
    if not isinstance(tuned, bool):
        raise ValueError(f"tuned must be True or False, got {tuned!r}")
    if tuned and block is not None:
        raise ValueError("block and tuned exclude each other: block sets the readable looping kernel's columns "
                         "per step, so pass tuned=False with it (the tuned kernel picks its own)")


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5, *,
               block: int | None = None, tuned: bool = True) -> torch.Tensor:
    """F.layer_norm(x, (N,), weight, bias, eps) of x (M, N): each row normalised, then scaled and shifted.

    A row that fits in one block is read once (`layer_norm_row_kernel`); a longer one is looped over, by default
    (`tuned=True`) by the autotuned `layer_norm_tuned_kernel`, with `tuned=False` by the readable
    `layer_norm_kernel`. `block` (with tuned=False) forces the readable looping kernel whatever the row length,
    with that many columns per step.
    """
    x, p = _check_inputs(x, {"weight": weight, "bias": bias}, eps, block)
    _check_tuned(tuned, block)
    (M, N), y = x.shape, torch.empty_like(x)
    kind, BLOCK, warps = launch_config(N, x.element_size(), block)
    if M and tuned and kind == "loop":
        layer_norm_tuned_kernel[_tuned_grid(M, x.device)](x, y, p["weight"], p["bias"], x.stride(0), y.stride(0),
                                                          M, N, float(eps))
    elif M:
        kernel = layer_norm_row_kernel if kind == "row" else layer_norm_kernel
        kernel[(M,)](x, y, p["weight"], p["bias"], x.stride(0), y.stride(0), N, float(eps),
                     BLOCK=BLOCK, num_warps=warps)
    return y


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, block: int | None = None,
             tuned: bool = True) -> torch.Tensor:
    """F.rms_norm(x, (N,), weight, eps) of x (M, N): each row divided by its root mean square, then scaled.

    Kernels, `block` and `tuned` as for layer_norm (`rms_norm_row_kernel`, `rms_norm_tuned_kernel`,
    `rms_norm_kernel`)."""
    x, p = _check_inputs(x, {"weight": weight}, eps, block)
    _check_tuned(tuned, block)
    (M, N), y = x.shape, torch.empty_like(x)
    kind, BLOCK, warps = launch_config(N, x.element_size(), block)
    if M and tuned and kind == "loop":
        rms_norm_tuned_kernel[_tuned_grid(M, x.device)](x, y, p["weight"], x.stride(0), y.stride(0), M, N, float(eps))
    elif M:
        kernel = rms_norm_row_kernel if kind == "row" else rms_norm_kernel
        kernel[(M,)](x, y, p["weight"], x.stride(0), y.stride(0), N, float(eps), BLOCK=BLOCK, num_warps=warps)
    return y
