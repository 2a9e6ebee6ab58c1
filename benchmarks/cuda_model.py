"""Measure on a real NVIDIA GPU the figures that chapter 2 of the book quotes, and print a table.

What it measures, each with CUDA C kernels through CuPy and timed with CUDA events:
- the device's limits as the driver reports them (SMs, registers, shared memory, L2);
- the occupancy the driver computes for many (block size, registers, shared memory), against
  `aisys.occupancy`;
- load latency by pointer chasing (one thread; shared memory, L1, L2, HBM);
- read bandwidth against the working set (4 MiB to 4 GiB) with loads that bypass L1 (`__ldcg`) and
  with loads that may be cached in it, which shows L1, then L2, then HBM; copy bandwidth with strided
  reads (coalescing), and the cost of shared-memory bank conflicts (strided, padded and XOR-swizzled reads);
- constant-memory reads when a warp's lanes read one address (broadcast) or several;
- kernel launch costs (launch + wait, back-to-back launches, CUDA graph replay);
- host-device transfers (pageable, pinned, zero-copy) and unified-memory page migration.

    PYTHONPATH=src python3 benchmarks/cuda_model.py [out.json]

It needs a GPU and CuPy; the book runs on a CPU and reads the saved results
(book/02-gpu-programming/h100_measurements.json).
"""

import ctypes
import datetime
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cupy as cp
import numpy as np

from aisys import occupancy

SOURCE = r"""
extern "C" __global__ void chase(const unsigned int* __restrict__ next, int warm, int steps,
                                 unsigned int* out, long long* cycles) {
    unsigned int j = 0;
    for (int k = 0; k < warm; ++k) j = next[j];
    long long t0 = clock64();
    for (int k = 0; k < steps; ++k) j = next[j];
    long long t1 = clock64();
    out[0] = j; cycles[0] = t1 - t0;
}

extern "C" __global__ void chase_shared(const unsigned int* __restrict__ next, int n, int steps,
                                        unsigned int* out, long long* cycles) {
    __shared__ unsigned int s[4096];
    for (int k = threadIdx.x; k < n; k += blockDim.x) s[k] = next[k];
    __syncthreads();
    if (threadIdx.x != 0) return;
    unsigned int j = 0;
    for (int k = 0; k < 256; ++k) j = s[j];
    long long t0 = clock64();
    for (int k = 0; k < steps; ++k) j = s[j];
    long long t1 = clock64();
    out[0] = j; cycles[0] = t1 - t0;
}

// Read bandwidth. The T = gridDim.x * blockDim.x threads read `steps` float4 each from a buffer of
// mask + 1 float4 (a power of two, as T is): at step k thread t reads element (t + k * (T + skew)) & mask.
// With skew = 0 every thread reads the same addresses on every pass over the buffer, so an SM re-reads
// the slice it read before; with skew = blockDim.x the window moves one block further each step, so a
// block reads the slice another block read. LOAD is the load: a plain dereference of a const __restrict__
// pointer (the compiler emits ld.global.nc, which may be cached in L1), __ldca (ld.global.ca, cache at all
// levels) or __ldcg (ld.global.cg, cache in L2, not in L1).
#define READ_KERNEL(NAME, LOAD)                                                                        \
extern "C" __global__ void NAME(const float4* __restrict__ in, long long mask, long long steps,        \
                                long long skew, float* out) {                                          \
    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;                                     \
    long long stride = (long long)gridDim.x * blockDim.x + skew;                                        \
    float acc = 0.f;                                                                                     \
    _Pragma("unroll 8")                                                                                  \
    for (long long k = 0; k < steps; ++k) {                                                              \
        float4 v = LOAD(in + ((t + k * stride) & mask));                                                 \
        acc += v.x + v.y + v.z + v.w;                                                                    \
    }                                                                                                    \
    if (acc == 1234.5f) out[0] = acc;  /* keeps the loads; practically never true */                   \
}
#define PLAIN(p) (*(p))
READ_KERNEL(read_nc, PLAIN)
READ_KERNEL(read_ca, __ldca)
READ_KERNEL(read_cg, __ldcg)

// Constant memory: lane l of each warp reads table[(c + (l % distinct) * 32) & 1023], so the warp's
// 32 lanes read `distinct` different addresses (1: one address, broadcast to all lanes).
__constant__ float table[1024];

extern "C" __global__ void constant_reads(int distinct, int reps, float* out) {
    int lane = threadIdx.x & 31;
    int spread = (lane % distinct) * 32;
    float a0 = 0.f, a1 = 0.f;
    for (int c = 0; c < reps; c += 2) {
        a0 += table[(c + spread) & 1023];
        a1 += table[(c + 1 + spread) & 1023];
    }
    if (a0 + a1 == 1234.5f) out[0] = a0;
}

extern "C" __global__ void copy_strided(const float* __restrict__ in, float* __restrict__ out, long long n,
                                        int stride) {
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) out[i] = in[i * stride];
}

extern "C" __global__ void copy_float4(const float4* __restrict__ in, float4* __restrict__ out, long long n4) {
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += step) out[i] = in[i];
}

// Lane l of each warp reads word l * pitch + c (or l * pitch + (c ^ l) when swizzled) of a tile in
// shared memory, for c = 0, 1, 2, ...: pitch 1 reads a row, pitch 32 a column of a 32 x 32 tile.
extern "C" __global__ void shared_reads(float* out, int pitch, int swizzle, int reps) {
    __shared__ float tile[32 * 33];
    for (int k = threadIdx.x; k < 32 * 33; k += blockDim.x) tile[k] = k;
    __syncthreads();
    int lane = threadIdx.x & 31;
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;  // four independent loads in flight
    for (int r = 0; r < reps; r += 4) {
        int c = r & 31;
        a0 += tile[lane * pitch + (swizzle ? (c ^ lane) : c)];
        a1 += tile[lane * pitch + (swizzle ? ((c + 1) ^ lane) : c + 1)];
        a2 += tile[lane * pitch + (swizzle ? ((c + 2) ^ lane) : c + 2)];
        a3 += tile[lane * pitch + (swizzle ? ((c + 3) ^ lane) : c + 3)];
    }
    if (a0 + a1 + a2 + a3 == 1234.5f) out[0] = a0;
}

extern "C" __global__ void empty() {}

extern "C" __global__ void sum_words(const unsigned int* __restrict__ in, long long n, unsigned int* out) {
    unsigned int acc = 0;
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) acc += in[i];
    atomicAdd(out, acc);
}

extern "C" __global__ void heavy(float* a, int n) {
    extern __shared__ float dynamic[];
    float v[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < 64; k++) v[k] = a[(i + k * 977) % n];
    float s = 0.f;
    #pragma unroll
    for (int k = 0; k < 64; k++) s += v[k] * v[63 - k] + v[(k * 7) & 63];
    a[i % n] = s;
    if (n < 0) dynamic[0] = s;
}
"""

MODULE = cp.RawModule(code=SOURCE, options=("-std=c++17",))
kernel = MODULE.get_function


def gpu_ms(run, repeat=10, warmup=2):
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


def device_properties():
    props = cp.cuda.runtime.getDeviceProperties(0)
    keep = ["multiProcessorCount", "major", "minor", "regsPerMultiprocessor", "regsPerBlock",
            "sharedMemPerMultiprocessor", "sharedMemPerBlock", "sharedMemPerBlockOptin", "reservedSharedMemPerBlock",
            "l2CacheSize", "persistingL2CacheMaxSize", "maxThreadsPerMultiProcessor", "maxThreadsPerBlock",
            "maxBlocksPerMultiProcessor", "warpSize", "clockRate", "memoryClockRate", "memoryBusWidth",
            "totalGlobalMem", "totalConstMem", "globalL1CacheSupported", "localL1CacheSupported",
            "asyncEngineCount", "concurrentManagedAccess", "pageableMemoryAccess"]
    result = {key: int(props[key]) for key in keep if key in props}
    result["name"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return result


def driver_occupancy(function, threads, shared):
    """cuOccupancyMaxActiveBlocksPerMultiprocessor for a CuPy RawKernel."""
    from cuda.bindings import driver
    error, blocks = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(driver.CUfunction(function.kernel.ptr),
                                                                       threads, shared)
    assert error == driver.CUresult.CUDA_SUCCESS, error
    return blocks


def occupancy_against_driver():
    checked, mismatches = 0, []
    for cap in (16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 128, 168, 255):
        module = cp.RawModule(code=SOURCE, options=(f"--maxrregcount={cap}",))
        heavy = module.get_function("heavy")
        heavy.max_dynamic_shared_size_bytes = 227 * 1024
        registers = heavy.num_regs
        for threads in range(32, 1025, 32):
            for shared in (0, 1000, 8192, 30000, 48 * 1024, 100 * 1024, 200 * 1024):
                driver = driver_occupancy(heavy, threads, shared)
                ours = occupancy.occupancy(threads, registers, shared, occupancy.H100).blocks_per_sm
                checked += 1
                if driver != ours:
                    mismatches.append({"threads": threads, "registers": registers, "shared": shared,
                                       "driver": driver, "aisys": ours})
    return {"checked": checked, "mismatches": mismatches[:20], "mismatch_count": len(mismatches)}


def chain(region_bytes, rng, line=128):
    """One random cycle through every `line`-byte piece of a region, as word indices:
    following[a] = b means 'after reading word a, read word b'. Word 0 is on the cycle."""
    order = rng.permutation(region_bytes // line).astype(np.int64) * (line // 4)
    following = np.zeros(region_bytes // 4, dtype=np.uint32)
    following[order] = np.roll(order, -1).astype(np.uint32)
    return following


def flush_l2():
    scratch = cp.empty(512 * 2**20 // 4, cp.float32)
    scratch.fill(0)
    cp.cuda.Device().synchronize()


def latency(rng):
    results = {}
    out, cycles = cp.zeros(1, cp.uint32), cp.zeros(1, cp.int64)
    steps = 20000
    for label, region in (("L1 (16 KiB region)", 16 * 1024), ("L2 (8 MiB region)", 8 * 2**20),
                          ("HBM (1 GiB region)", 2**30)):
        following_gpu = cp.asarray(chain(region, rng))
        if region <= 8 * 2**20:  # a first pass brings the region into the cache
            warm, repeat, warmup = region // 128, 3, 1
        else:  # one run, after flushing L2: a second run would find the visited lines in L2
            warm, repeat, warmup = 0, 1, 0
            flush_l2()
        # The chain is bound as an argument: the loop deletes it (1 GiB) before making the next.
        ms = gpu_ms(lambda chain=following_gpu: kernel("chase")((1,), (1,), (chain, np.int32(warm), np.int32(steps),
                                                                             out, cycles)),
                    repeat=repeat, warmup=warmup)
        results[label] = {"cycles": int(cycles.get()[0]) / steps, "ns_per_load_events": ms * 1e6 / (warm + steps)}
        del following_gpu
    following = chain(4096 * 4, rng, line=4)  # every word of 16 KiB, in random order
    ms = gpu_ms(lambda: kernel("chase_shared")((1,), (128,), (cp.asarray(following), np.int32(4096),
                                                              np.int32(steps), out, cycles)), repeat=3, warmup=1)
    results["shared memory"] = {"cycles": int(cycles.get()[0]) / steps}
    return results


READS = {  # label: (kernel, skew in blocks)
    "__ldcg (L2 only), window moved each step": ("read_cg", 1),
    "__ldca (ld.global.ca), same slice each pass": ("read_ca", 0),
    "const __restrict__ (ld.global.nc), same slice each pass": ("read_nc", 0),
}


def read_sweep(sms):
    """Read bandwidth against the working set, 4 MiB to 4 GiB, for each load in READS.

    Every launch reads at least 4 GiB (and at least the whole working set), so launch costs vanish.
    The grid is a power of two (1024 blocks of 256 threads, at most 8 resident per SM: all resident at once).
    The smallest working set is what one step of all threads reads (4 MiB): below it several threads
    would read the same address in the same step, which is no longer a test of bandwidth.
    """
    blocks, threads = 1024, 256
    assert blocks <= sms * 8, "the grid must be resident at once"
    per_step = blocks * threads * 16  # bytes read by one step of all threads
    sizes = [2**k for k in range(22, 33)]  # 4 MiB ... 4 GiB
    assert sizes[0] == per_step
    buffer = cp.ones(sizes[-1] // 4, cp.float32)
    out = cp.zeros(1, cp.float32)
    sweep = {"working set (bytes)": sizes, "grid": [blocks, threads], "TB/s": {}}
    for label, (name, skew) in READS.items():
        function, rates = kernel(name), []
        for size in sizes:
            steps = max(size, 4 * 2**30) // per_step
            ms = gpu_ms(lambda: function((blocks,), (threads,), (buffer, np.int64(size // 16 - 1), np.int64(steps),
                                                                  np.int64(skew * threads), out)))
            rates.append(steps * per_step / (ms / 1e3) / 1e12)
        sweep["TB/s"][label] = rates
    return sweep


def load_instructions():
    """The global-load instructions (SASS) nvcc gives each read kernel for this GPU, read back with cuobjdump."""
    props = cp.cuda.runtime.getDeviceProperties(0)
    arch = f"sm_{props['major']}{props['minor']}"
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "model.cu").write_text(SOURCE)
        subprocess.run(["nvcc", f"-arch={arch}", "-std=c++17", "-cubin", "-o", "model.cubin", "model.cu"],
                       cwd=folder, check=True)
        sass = subprocess.run(["cuobjdump", "-sass", "model.cubin"], cwd=folder, check=True,
                              capture_output=True, text=True).stdout
    found = {}
    for function in sass.split("Function : ")[1:]:
        name = function.split()[0]
        if name.startswith("read_"):
            found[name] = sorted(set(re.findall(r"\b(LDG\.[A-Z0-9.]+)", function)))
    return {"arch": arch, "LDG opcodes by kernel": found}


def constant_reads():
    """Time of a warp's constant-memory reads when its 32 lanes read 1, 2, 4, 8, 16 or 32 different addresses."""
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    out, reps, result = cp.zeros(1, cp.float32), 4096, {}
    for distinct in (1, 2, 4, 8, 16, 32):
        ms = gpu_ms(lambda: kernel("constant_reads")((sms * 4,), (256,), (np.int32(distinct), np.int32(reps), out)))
        result[str(distinct)] = ms
    return {"ms by distinct addresses per warp": result, "grid": [sms * 4, 256], "reads per thread": reps}


def bandwidths():
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    grid, block = sms * 8, 256
    result = {}
    out = cp.zeros(1, cp.float32)
    sweep = read_sweep(sms)
    honest = sweep["TB/s"]["__ldcg (L2 only), window moved each step"]
    sizes = sweep["working set (bytes)"]
    result["L2 read (__ldcg, 16 MiB working set)"] = honest[sizes.index(16 * 2**20)]
    result["HBM read (4 GiB buffer)"] = honest[sizes.index(4 * 2**30)]
    result["read bandwidth by working set"] = sweep
    n = 2**26
    strided = {}
    for stride in (1, 2, 4, 8, 16, 32):
        source, target = cp.empty(n * stride, cp.float32), cp.empty(n, cp.float32)
        ms = gpu_ms(lambda: kernel("copy_strided")((grid,), (block,), (source, target, np.int64(n), np.int32(stride))))
        strided[stride] = 8 * n / (ms / 1e3) / 1e12  # useful bytes: 4 read + 4 written per element
        del source, target
    result["copy with strided reads, useful TB/s by stride"] = strided
    source, target = cp.empty(n, cp.float32), cp.empty(n, cp.float32)
    ms = gpu_ms(lambda: kernel("copy_float4")((grid,), (block,), (source, target, np.int64(n // 4))))
    result["copy with float4 (16-byte) accesses"] = 8 * n / (ms / 1e3) / 1e12
    reps, blocks, threads = 4096, sms * 4, 1024
    shared = {}
    for label, pitch, swizzle in (("row (pitch 1)", 1, 0), ("pitch 2", 2, 0), ("pitch 4", 4, 0), ("pitch 8", 8, 0),
                                  ("pitch 16", 16, 0), ("column (pitch 32)", 32, 0),
                                  ("column, padded (pitch 33)", 33, 0), ("column, XOR swizzle", 32, 1)):
        ms = gpu_ms(lambda: kernel("shared_reads")((blocks,), (threads,),
                                                   (out, np.int32(pitch), np.int32(swizzle), np.int32(reps))))
        shared[label] = {"ms": ms, "TB/s": blocks * threads * reps * 4 / (ms / 1e3) / 1e12}
    result["shared-memory reads"] = shared
    return result


def launches():
    empty = kernel("empty")
    empty((1,), (1,), ())
    cp.cuda.Device().synchronize()
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        empty((1,), (1,), ())
        cp.cuda.Device().synchronize()
    launch_and_wait = (time.perf_counter() - t0) / n
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        empty((1,), (1,), ())
    cp.cuda.Device().synchronize()
    back_to_back = (time.perf_counter() - t0) / n
    stream = cp.cuda.Stream(non_blocking=True)
    kernels_per_graph = 100
    with stream:
        stream.begin_capture()
        for _ in range(kernels_per_graph):
            empty((1,), (1,), ())
        graph = stream.end_capture()
    graph.launch(stream)
    stream.synchronize()
    replays = 200
    t0 = time.perf_counter()
    for _ in range(replays):
        graph.launch(stream)
    stream.synchronize()
    per_kernel_graph = (time.perf_counter() - t0) / (replays * kernels_per_graph)
    return {"launch and wait, us": launch_and_wait * 1e6, "back-to-back launches, us each": back_to_back * 1e6,
            "CUDA graph replay, us per kernel": per_kernel_graph * 1e6}


def transfers():
    size = 256 * 2**20
    host = np.ones(size // 4, np.float32)
    device = cp.empty(size // 4, cp.float32)
    result = {}
    result["H2D pageable, GB/s"] = size / (gpu_ms(lambda: device.set(host), repeat=5) / 1e3) / 1e9
    pinned_memory = cp.cuda.alloc_pinned_memory(size)
    pinned = np.frombuffer(pinned_memory, np.float32, size // 4)
    pinned[:] = 1
    result["H2D pinned, GB/s"] = size / (gpu_ms(lambda: device.set(pinned), repeat=5) / 1e3) / 1e9
    result["D2H pinned, GB/s"] = size / (gpu_ms(lambda: device.get(out=pinned), repeat=5) / 1e3) / 1e9
    # Zero-copy: a kernel reads mapped, pinned host memory directly over PCIe.
    mapped = cp.cuda.runtime.hostAlloc(size, 2)  # cudaHostAllocMapped
    ctypes.memset(mapped, 1, size)
    # With unified virtual addressing (every 64-bit CUDA platform) the host address is valid on the device.
    words = cp.ndarray((size // 4,), cp.uint32, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(mapped, size, None), 0))
    total = cp.zeros(1, cp.uint32)
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    ms = gpu_ms(lambda: kernel("sum_words")((sms * 8,), (256,), (words, np.int64(size // 4), total)), repeat=5)
    result["zero-copy kernel read, GB/s"] = size / (ms / 1e3) / 1e9
    cp.cuda.runtime.freeHost(mapped)
    # Unified memory: pages start on the host; the first kernel touches them and they migrate.
    managed = cp.cuda.malloc_managed(size)
    words = cp.ndarray((size // 4,), cp.uint32, managed)
    runs = {}
    for label, prefetch in (("first touch (pages fault over)", False), ("prefetched", True)):
        ctypes.memset(managed.ptr, 1, size)  # the host writes: the pages move to the host
        if prefetch:
            cp.cuda.runtime.memPrefetchAsync(managed.ptr, size, 0, 0)
        cp.cuda.Device().synchronize()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        kernel("sum_words")((sms * 8,), (256,), (words, np.int64(size // 4), total))
        stop.record()
        stop.synchronize()
        runs[label] = size / (cp.cuda.get_elapsed_time(start, stop) / 1e3) / 1e9
    ms = gpu_ms(lambda: kernel("sum_words")((sms * 8,), (256,), (words, np.int64(size // 4), total)), repeat=5)
    runs["resident on the GPU"] = size / (ms / 1e3) / 1e9
    result["unified memory kernel read, GB/s"] = runs
    return result


def main():
    rng = np.random.default_rng(0)
    report = {"date": datetime.date.today().isoformat(), "device": device_properties(),
              "driver": cp.cuda.runtime.driverGetVersion(), "runtime": cp.cuda.runtime.runtimeGetVersion(),
              "cupy": cp.__version__}
    for name, part in (("occupancy", occupancy_against_driver), ("latency", lambda: latency(rng)),
                       ("bandwidth", bandwidths), ("constant memory", constant_reads),
                       ("read instructions", load_instructions), ("launch", launches),
                       ("transfers", transfers)):
        t0 = time.perf_counter()
        try:
            report[name] = part()
        except Exception as error:
            report[name] = {"error": repr(error)}
        print(f"{name} ({time.perf_counter() - t0:.1f} s):\n{json.dumps(report[name], indent=1)}", flush=True)
    text = json.dumps(report, indent=1)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(text + "\n")
    print(json.dumps(report["device"], indent=1))


if __name__ == "__main__":
    main()
