"""Measure on a real NVIDIA GPU the figures that chapter 2 of the book quotes, and print a table.

What it measures, each with CUDA C kernels through CuPy and timed with CUDA events:
- the device's limits as the driver reports them (SMs, registers, shared memory, L2);
- the occupancy the driver computes for many (block size, registers, shared memory), against
  `aisys.occupancy`;
- load latency by pointer chasing (one thread; shared memory, L1, L2, HBM);
- read bandwidth from L2 and from HBM, copy bandwidth with strided reads (coalescing), and
  the cost of shared-memory bank conflicts (strided, padded and XOR-swizzled reads);
- kernel launch costs (launch + wait, back-to-back launches, CUDA graph replay);
- host-device transfers (pageable, pinned, zero-copy) and unified-memory page migration.

    PYTHONPATH=src python3 benchmarks/cuda_model.py [out.json]

It needs a GPU and CuPy; the book runs on a CPU and reads the saved results
(book/02-gpu-programming/h100_measurements.json).
"""

import ctypes
import datetime
import json
import statistics
import sys
import time

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

extern "C" __global__ void read_sum(const float4* __restrict__ in, long long n4, int reps, float* out) {
    float acc = 0.f;
    long long start = blockIdx.x * (long long)blockDim.x + threadIdx.x, step = (long long)gridDim.x * blockDim.x;
    for (int r = 0; r < reps; ++r)
        for (long long i = start; i < n4; i += step) { float4 v = in[i]; acc += v.x + v.y + v.z + v.w; }
    if (acc == 1234.5f) out[0] = acc;  // keeps the loads; practically never true
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
            "totalGlobalMem", "asyncEngineCount", "concurrentManagedAccess", "pageableMemoryAccess"]
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


def bandwidths():
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    grid, block = sms * 8, 256
    result = {}
    out = cp.zeros(1, cp.float32)
    for label, size, reps in (("L2 read (16 MiB buffer, re-read)", 16 * 2**20, 50),
                              ("HBM read (4 GiB buffer)", 4 * 2**30, 1)):
        buffer = cp.empty(size // 4, cp.float32)
        # The buffer is bound as an argument: the loop deletes it (4 GiB) before making the next.
        ms = gpu_ms(lambda data=buffer: kernel("read_sum")((grid,), (block,), (data, np.int64(size // 16),
                                                                               np.int32(reps), out)))
        result[label] = size * reps / (ms / 1e3) / 1e12
        del buffer
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
                       ("bandwidth", bandwidths), ("launch", launches), ("transfers", transfers)):
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
