"""Does the simulator see what the hardware does? Its counts against Nsight Compute's, on the same kernels.

    python benchmarks/simt_vs_ncu.py             # on a machine with an NVIDIA GPU and `ncu` on PATH

Each kernel below runs once in the simulator (its report) and once on the GPU
under `ncu` (hardware counters): global-memory requests and 32-byte sectors of
loads and stores, and shared-memory bank conflicts. The simulator groups lanes
into warp instructions the way the hardware does, so the counts should agree
where the compiler emits one memory instruction per source access. Divergence is
counted per source branch by the simulator and per SASS branch by ncu; the compiler
turns short branches into predicated code, so those counts agree only in kind.
"""

import csv
import io
import os
import re
import shutil
import subprocess
import sys

import numpy as np

from aisys import simt
from aisys.cuda_kernels import transpose as exercise_transpose
from aisys.simt import cuda

TILE = 32
N = 256  # matrix side; the copies move N*N floats
TILE_PADDED = TILE + 1  # numba compiles shapes made of numbers and global names only

METRICS = {
    "global load requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "global load sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "global store requests": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "global store sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "shared load bank conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "shared store bank conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "divergent branches": "smsp__sass_branch_targets_threads_divergent.sum",
}
BLOCK = 256


@cuda.jit
def copy(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i]


@cuda.jit
def copy_stride2(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[2 * i]


@cuda.jit
def transpose_naive(a, out):
    col, row = cuda.grid(2)
    if row < a.shape[0] and col < a.shape[1]:
        out[col, row] = a[row, col]


@cuda.jit
def transpose_tile(a, out):
    tile = cuda.shared.array((TILE, TILE), np.float32)
    x, y = cuda.threadIdx.x, cuda.threadIdx.y
    col, row = cuda.blockIdx.x * TILE + x, cuda.blockIdx.y * TILE + y
    tile[y, x] = a[row, col]
    cuda.syncthreads()
    col, row = cuda.blockIdx.y * TILE + x, cuda.blockIdx.x * TILE + y
    out[row, col] = tile[x, y]


@cuda.jit
def transpose_padded(a, out):
    tile = cuda.shared.array((TILE, TILE_PADDED), np.float32)
    x, y = cuda.threadIdx.x, cuda.threadIdx.y
    col, row = cuda.blockIdx.x * TILE + x, cuda.blockIdx.y * TILE + y
    tile[y, x] = a[row, col]
    cuda.syncthreads()
    col, row = cuda.blockIdx.y * TILE + x, cuda.blockIdx.x * TILE + y
    out[row, col] = tile[x, y]


@cuda.jit
def sum_interleaved(x, partial):
    s = cuda.shared.array(BLOCK, np.float32)
    t = cuda.threadIdx.x
    s[t] = x[cuda.grid(1)]
    cuda.syncthreads()
    step = 1
    while step < BLOCK:
        if t % (2 * step) == 0:
            s[t] += s[t + step]
        cuda.syncthreads()
        step *= 2
    if t == 0:
        partial[cuda.blockIdx.x] = s[0]


@cuda.jit
def sum_sequential(x, partial):
    s = cuda.shared.array(BLOCK, np.float32)
    t = cuda.threadIdx.x
    s[t] = x[cuda.grid(1)]
    cuda.syncthreads()
    step = BLOCK // 2
    while step > 0:
        if t < step:
            s[t] += s[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = s[0]


def launches():
    """(kernel, grid, block, arguments) of every case."""
    a = np.arange(N * N, dtype=np.float32).reshape(N, N)
    flat = a.ravel()
    grid2 = (N // TILE, N // TILE)
    return [(copy, N * N // 256, 256, (flat, np.zeros_like(flat))),
            (copy_stride2, N * N // 512, 256, (flat, np.zeros(N * N // 2, np.float32))),
            (transpose_naive, grid2, (TILE, TILE), (a, np.zeros_like(a))),
            (transpose_tile, grid2, (TILE, TILE), (a, np.zeros_like(a))),
            (transpose_padded, grid2, (TILE, TILE), (a, np.zeros_like(a))),
            (exercise_transpose.transpose_kernel, grid2, (TILE, exercise_transpose.BLOCK_ROWS),
             (a.view(np.int32), np.zeros_like(a).view(np.int32))),
            (sum_interleaved, N * N // BLOCK, BLOCK, (flat, np.zeros(N * N // BLOCK, np.float32))),
            (sum_sequential, N * N // BLOCK, BLOCK, (flat, np.zeros(N * N // BLOCK, np.float32)))]


def simulated(report: dict) -> dict:
    rows = report["lines"]

    def total(space, kind, key):
        return sum(r[key] for r in rows if r["space"] == space and r["kind"] == kind)

    return {"global load requests": total("global", "load", "requests"),
            "global load sectors": total("global", "load", "sectors"),
            "global store requests": total("global", "store", "requests"),
            "global store sectors": total("global", "store", "sectors"),
            "shared load bank conflicts": total("shared", "load", "bank_conflicts"),
            "shared store bank conflicts": total("shared", "store", "bank_conflicts"),
            "divergent branches": report["branches"]["divergent"]}


def measured() -> dict:
    """ncu's counts per kernel name, from profiling this script's --launch mode."""
    command = ["ncu", "--csv", "--metrics", ",".join(METRICS.values()), sys.executable, __file__, "--launch"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"ncu failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    text = done.stdout[done.stdout.index('"ID"'):]
    counts: dict = {}
    names = {v: k for k, v in METRICS.items()}
    for row in csv.DictReader(io.StringIO(text)):
        # the whole Python name, not a part of a longer one (copy in copy_stride2)
        kernel = next(k[0].__name__ for k in launches()
                      if re.search(rf"(?<![A-Za-z0-9_]){k[0].__name__}(?![A-Za-z0-9_])", row["Kernel Name"]))
        counts.setdefault(kernel, {})[names[row["Metric Name"]]] = float(row["Metric Value"].replace(",", ""))
    return counts


def main():
    if "--launch" in sys.argv:  # under ncu: run each kernel on the GPU once
        for kernel, grid, block, args in launches():
            kernel[grid, block](*args)
        cuda.synchronize()
        return
    if shutil.which("ncu") is None:
        sys.exit("ncu (Nsight Compute) is not on PATH")
    hardware = measured()
    print(f"{'kernel':<18}{'counter':<30}{'simulator':>12}{'ncu':>12}")
    for kernel, grid, block, args in launches():
        with simt.profile() as reports:
            kernel[grid, block](*args)
        for name, value in simulated(reports[0].to_plain()).items():
            counted = hardware[kernel.__name__].get(name, float("nan"))
            print(f"{kernel.__name__:<18}{name:<30}{value:>12}{counted:>12.0f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
