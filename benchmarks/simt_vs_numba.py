"""How fast the aisys SIMT simulator runs kernels, against numba's own CUDA simulator, on the same source.

    python benchmarks/simt_vs_numba.py [n]       (n: elements, default 65536)

Each simulator runs in a fresh process (numba's is switched on by NUMBA_ENABLE_CUDASIM=1
before numba is imported), on the kernels below, which are written once and
imported under `cuda` from either `aisys.simt` or `numba`. Only the launch is timed.
"""

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

KERNELS = '''
import numpy as np
import os
if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    from numba import cuda
else:
    from aisys.simt import cuda

BLOCK = 256


@cuda.jit
def add(x, y, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.size, stride):
        out[i] = x[i] + y[i]


@cuda.jit
def block_sums(x, partial):
    shared = cuda.shared.array(BLOCK, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK * 2 + tid
    value = np.float32(0)
    if i < x.size:
        value = x[i]
    if i + BLOCK < x.size:
        value += x[i + BLOCK]
    shared[tid] = value
    cuda.syncthreads()
    step = BLOCK // 2
    while step > 0:  # no warp shuffles for the last 32: numba's simulator has none
        if tid < step:
            shared[tid] += shared[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = shared[0]
'''

RUN = '''
import sys, time
import numpy as np
sys.path.insert(0, {folder!r})
import kernels
n = {n}
x = np.random.default_rng(0).random(n).astype(np.float32)
out = np.zeros(n, np.float32)
start = time.perf_counter()
kernels.add[32, 128](x, x, out)
add = time.perf_counter() - start
assert np.array_equal(out, 2 * x)
blocks = -(-n // (2 * kernels.BLOCK))
partial = np.zeros(blocks, np.float32)
start = time.perf_counter()
kernels.block_sums[blocks, kernels.BLOCK](x, partial)
reduce = time.perf_counter() - start
assert np.isclose(partial.sum(), x.sum(), rtol=1e-4)
print(add, reduce)
'''


def timings(folder: str, n: int, numba_simulator: bool) -> tuple[float, float]:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1" if numba_simulator else "0"}
    done = subprocess.run([sys.executable, "-c", RUN.format(folder=folder, n=n)], env=env, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    add, reduce = map(float, done.stdout.split())
    return add, reduce


def main(n: int = 1 << 16) -> None:
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "kernels.py").write_text(textwrap.dedent(KERNELS))
        ours = timings(folder, n, numba_simulator=False)
        numba = timings(folder, n, numba_simulator=True)
    print(f"{n} elements; seconds per launch (lower is better)")
    print(f"{'kernel':<36}{'aisys.simt':>12}{'numba sim':>12}{'speed-up':>10}")
    for name, a, b in (("add, grid-stride, 32 x 128 threads", ours[0], numba[0]),
                       (f"block_sums, {-(-n // 512)} x 256 threads", ours[1], numba[1])):
        print(f"{name:<36}{a:>12.2f}{b:>12.2f}{b / a:>9.1f}x")
    print("aisys.simt also logs every access for its report; numba's simulator reports nothing.")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 16)
