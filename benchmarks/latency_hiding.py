"""Read bandwidth against warps per SM and independent loads per thread (ILP), beside Little's law's prediction.

    PYTHONPATH=src python3 benchmarks/latency_hiding.py [--out PATH]
    # PATH for the results; default /tmp/latency_hiding.json (the book reads
    # book/01-architecture/latency_hiding_<gpu>.json, <gpu> from aisys.bench.gpu_label: latency_hiding_h100.json)

CUDA C kernels through CuPy, timed with CUDA events (median of 5 after a warm-up):

- the latency of a load that misses both caches: one thread follows a random cyclic chain of pointers laid 256
  bytes apart over 1 GiB (every load depends on the last, so the time per step is the latency; at this size
  nearly every step misses the 50 MiB L2);
- the read bandwidth of a kernel in which each warp keeps ILP = 1, 2, 4 or 8 independent coalesced float32 loads
  (`__ldcg`: L2 only, 128 bytes per warp load) in flight before it adds them up, launched with blocks of 64 threads
  (2 warps) and exactly (SMs x blocks per SM) blocks, 1 to 32 blocks per SM: 2 to 64 warps resident per SM, all
  resident at once. The outer loop is kept rolled (`#pragma unroll 1`) so that the compiler cannot put more loads
  in flight than ILP says. Each launch reads 1 GiB;
- the baseline in the same run: CuPy's `x.sum()` (a CUB reduction) on the same buffer.

Prints a table of the measured bandwidth, Little's law's prediction from the measured latency
(aisys.latency.bandwidth_reached) and the fraction of the datasheet bandwidth (aisys.hardware), and writes every
row with the device, the latency and the versions to PATH. It needs an NVIDIA GPU and CuPy; without them it says so
and exits.
"""

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from aisys import latency
from aisys.bench import gpu_label
from aisys.hardware import chip_for_device

ILPS = (1, 2, 4, 8)
THREADS = 64  # two warps per block: 32 blocks per SM reach the SM's 64 warps
WARP_LOAD = 32 * 4  # bytes of one coalesced float32 load by a warp
READ_BYTES = 2**30
CHAIN_BYTES, NODE_BYTES, STEPS = 2**30, 256, 20000

SOURCE = r"""
extern "C" __global__ void chase(const unsigned int* __restrict__ next, unsigned int start, int steps,
                                 unsigned int* out) {
    unsigned int j = start;
    for (int k = 0; k < steps; ++k) j = next[j];
    out[0] = j;
}

template <int ILP>
__device__ void read_ilp(const float* __restrict__ x, long long rounds, float* out) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    #pragma unroll 1
    for (long long r = 0; r < rounds; ++r) {
        const long long base = r * ILP * stride + tid;
        float v[ILP];
        #pragma unroll
        for (int k = 0; k < ILP; ++k) v[k] = __ldcg(x + base + k * stride);  // ILP independent loads in flight
        #pragma unroll
        for (int k = 0; k < ILP; ++k) acc += v[k];
    }
    if (acc == -1.0f) out[0] = acc;  // never true for the data below; keeps the loads alive
}

extern "C" __global__ void read1(const float* x, long long rounds, float* out) { read_ilp<1>(x, rounds, out); }
extern "C" __global__ void read2(const float* x, long long rounds, float* out) { read_ilp<2>(x, rounds, out); }
extern "C" __global__ void read4(const float* x, long long rounds, float* out) { read_ilp<4>(x, rounds, out); }
extern "C" __global__ void read8(const float* x, long long rounds, float* out) { read_ilp<8>(x, rounds, out); }
"""


def gpu_ms(cp, run, repeat=5, warmup=1):
    """Median milliseconds of `run()` timed with CUDA events."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeat):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def hbm_latency(cp, module, rng) -> float:
    """Seconds per step of a pointer chase over CHAIN_BYTES, nodes NODE_BYTES apart, in one random cycle."""
    stride = NODE_BYTES // 4  # in uint32 words
    nodes = CHAIN_BYTES // NODE_BYTES
    order = rng.permutation(nodes).astype(np.int64)
    following = np.zeros(CHAIN_BYTES // 4, dtype=np.uint32)
    following[order * stride] = np.roll(order, -1) * stride  # node order[i] points at node order[i + 1]
    chain = cp.asarray(following)
    del following
    out = cp.zeros(1, cp.uint32)
    chase = module.get_function("chase")
    chase((1,), (1,), (chain, np.uint32(0), np.int32(1), out))  # load the module; touch one node
    cp.cuda.Device().synchronize()
    # three runs over disjoint stretches of the cycle, so that no run finds another's lines in L2
    times = []
    for part in range(3):
        start = np.uint32(order[(part + 1) * nodes // 4] * stride)
        times.append(gpu_ms(cp, lambda start=start: chase((1,), (1,), (chain, start, np.int32(STEPS), out)),
                            repeat=1, warmup=0))
    ms = statistics.median(times)
    return ms * 1e-3 / STEPS


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="/tmp/latency_hiding.json")
    args = parser.parse_args()
    try:
        import cupy as cp
        cp.cuda.runtime.getDeviceCount()
    except Exception as error:  # no CuPy, no driver or no GPU
        print(f"latency_hiding.py needs an NVIDIA GPU and CuPy ({type(error).__name__}: {error}); nothing measured")
        return 0

    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    sms = int(props["multiProcessorCount"])
    known = chip_for_device(name)
    peak = known.memory_bandwidth if known else None
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    rng = np.random.default_rng(0)

    seconds = hbm_latency(cp, module, rng)
    x = cp.ones(READ_BYTES // 4, dtype=cp.float32)
    out = cp.zeros(1, cp.float32)
    baseline_ms = gpu_ms(cp, lambda: x.sum())
    baseline = READ_BYTES / (baseline_ms * 1e-3)

    rows = []
    print(f"{name}: {sms} SMs, HBM latency (pointer chase) {seconds * 1e9:.0f} ns, "
          f"baseline x.sum() {baseline / 1e12:.2f} TB/s" + (f", datasheet {peak / 1e12:.2f} TB/s" if peak else ""))
    print(f"{'ILP':>3} {'warps/SM':>8} {'TB/s':>6} {'model TB/s':>10} {'of datasheet':>12} {'of x.sum()':>10}")
    for ilp in ILPS:
        kernel = module.get_function(f"read{ilp}")
        for blocks_per_sm in range(1, 33):
            grid = sms * blocks_per_sm
            step = grid * THREADS * ilp  # elements one round reads
            rounds = (READ_BYTES // 4) // step
            ms = gpu_ms(cp, lambda: kernel((grid,), (THREADS,), (x, np.int64(rounds), out)))
            measured = rounds * step * 4 / (ms * 1e-3)
            warps = blocks_per_sm * THREADS // 32
            model = latency.bandwidth_reached(seconds, peak or baseline, sms, warps, WARP_LOAD, ilp)
            rows.append({"ilp": ilp, "warps_per_sm": warps, "bytes_per_s": measured, "model_bytes_per_s": model,
                         "ms": ms})
            print(f"{ilp:3} {warps:8} {measured / 1e12:6.2f} {model / 1e12:10.2f} "
                  f"{(measured / peak if peak else float('nan')):12.0%} {measured / baseline:10.0%}", flush=True)

    report = {"date": datetime.date.today().isoformat(), "device": name, "gpu": gpu_label(name), "sms": sms,
              "cupy": cp.__version__, "runtime": cp.cuda.runtime.runtimeGetVersion(),
              "latency_s": seconds, "datasheet_bytes_per_s": peak, "baseline": {"what": "cupy x.sum()",
                                                                                "bytes_per_s": baseline},
              "threads_per_block": THREADS, "bytes_per_warp_load": WARP_LOAD, "read_bytes": READ_BYTES,
              "rows": rows}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out} (the book reads book/01-architecture/latency_hiding_{gpu_label(name)}.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
