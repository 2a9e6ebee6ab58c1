"""Inclusive prefix sum (scan): a work-efficient Brent-Kung scan per block, then block offsets added across blocks.

scan(x)[i] = x[0] + x[1] + ... + x[i], the same as np.cumsum(x) but in x's own
dtype (np.cumsum widens int32 to int64; here int32 stays int32 and wraps on
overflow, as it would in CUDA).

Stage 1, `block_scan`: each block of THREADS threads scans its SECTION = 2 *
THREADS consecutive elements in shared memory, in two sweeps over a balanced
tree (Brent and Kung 1982; the tree is the one of Blelloch's scan, 1990):

    up-sweep   for stride = 1, 2, 4, ..., SECTION / 2:
                   s[k] += s[k - stride]  for k = 2*stride - 1, 4*stride - 1, ...
    down-sweep for stride = SECTION / 4, ..., 2, 1:
                   s[k + stride] += s[k]  for k = 2*stride - 1, 4*stride - 1, ...

The up-sweep leaves the sum of each aligned run of 2*stride elements at the
run's last index; the down-sweep carries those partial sums to the indices
in between. Each sweep does fewer than SECTION additions, so the whole scan
does O(n) work, against O(n log n) for the simpler Hillis-Steele scan
(s[i] += s[i - stride] for every i, at every stride). A barrier separates the
levels: each level reads what the level before it wrote, in other threads.

Stage 2, `scan`: the last element of each block's scan is that block's total.
Scanning the totals (recursively: they are an array like any other) gives,
for block b, the sum of blocks 0..b; a second kernel adds the entry of block
b - 1 to every element of block b.
"""

import functools
import math

import numpy as np

from aisys.simt import cuda

SECTION = 256  # elements one block scans
THREADS = SECTION // 2  # threads per block: each loads, scans and stores two elements
OFFSET_THREADS = 256  # threads per block of the kernel that adds the block offsets
DTYPES = (np.float32, np.int32, np.int64)


@functools.cache
def make_block_scan_kernel(dtype):
    """The stage-1 kernel for one dtype (numba needs the shared array's dtype when it compiles the kernel)."""

    @cuda.jit
    def block_scan_kernel(x, out, totals):
        """out = inclusive scan of each SECTION-element chunk of x; totals[b] = the sum of chunk b."""
        s = cuda.shared.array(SECTION, dtype)
        t = cuda.threadIdx.x
        start = cuda.blockIdx.x * SECTION
        # Thread t moves elements t and t + THREADS: a warp touches 32 consecutive ones (coalesced).
        for k in range(t, SECTION, THREADS):
            if start + k < x.size:
                s[k] = x[start + k]
            else:
                s[k] = 0  # the last block may be partial: zeros leave the sums of real elements unchanged

        stride = 1
        while stride < SECTION:  # up-sweep
            cuda.syncthreads()  # the level before has written what this level reads
            k = (t + 1) * 2 * stride - 1  # consecutive threads take consecutive pairs: busy threads stay packed
            if k < SECTION:
                s[k] += s[k - stride]
            stride *= 2

        stride = SECTION // 4
        while stride > 0:  # down-sweep
            cuda.syncthreads()
            k = (t + 1) * 2 * stride - 1
            if k + stride < SECTION:
                s[k + stride] += s[k]
            stride //= 2
        cuda.syncthreads()

        for k in range(t, SECTION, THREADS):
            if start + k < x.size:
                out[start + k] = s[k]
        if t == 0:
            totals[cuda.blockIdx.x] = s[SECTION - 1]

    return block_scan_kernel


@cuda.jit
def add_offsets_kernel(out, sums):
    """out[i] += sums[b - 1] for every element i of block b >= 1; sums[b] = the total of blocks 0..b."""
    i = SECTION + cuda.grid(1)  # block 0 needs no offset
    if i < out.size:
        out[i] += sums[i // SECTION - 1]


def _check(x) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"x must be a 1-D array, got {x.ndim} dimensions (shape {x.shape})")
    if x.dtype not in DTYPES:
        raise ValueError(f"x must be float32, int32 or int64, got {x.dtype}")
    return np.ascontiguousarray(x)


def block_scan_device(d_x, d_out):
    """Launch the block scan of device array d_x into d_out; return the device array of the block totals."""
    blocks = math.ceil(d_x.size / SECTION)
    d_totals = cuda.device_array(blocks, d_x.dtype)
    make_block_scan_kernel(d_x.dtype.type)[blocks, THREADS](d_x, d_out, d_totals)
    return d_totals


def scan_device(d_x, d_out):
    """Inclusive scan of device array d_x into d_out."""
    d_totals = block_scan_device(d_x, d_out)
    if d_totals.size > 1:
        d_sums = cuda.device_array(d_totals.size, d_totals.dtype)
        scan_device(d_totals, d_sums)  # the totals of up to SECTION blocks take one more block, and so on
        rest = d_x.size - SECTION
        add_offsets_kernel[math.ceil(rest / OFFSET_THREADS), OFFSET_THREADS](d_out, d_sums)


def block_scan(x: np.ndarray) -> np.ndarray:
    """Inclusive scan of each SECTION-element chunk of x on its own (stage 1 of `scan`)."""
    x = _check(x)
    if x.size == 0:
        return x.copy()
    d_out = cuda.device_array(x.size, x.dtype)
    block_scan_device(cuda.to_device(x), d_out)
    return d_out.copy_to_host()


def scan(x: np.ndarray) -> np.ndarray:
    """Inclusive prefix sum of a 1-D float32, int32 or int64 array, in its dtype: np.cumsum(x, dtype=x.dtype)."""
    x = _check(x)
    if x.size == 0:
        return x.copy()
    d_out = cuda.device_array(x.size, x.dtype)
    scan_device(cuda.to_device(x), d_out)
    return d_out.copy_to_host()
