"""Global memory: how a warp's loads become 32-byte sectors, vector loads, bytes in flight (Little's law), and what
Nsight Compute's memory metrics say."""

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.hardware import CHIPS
from aisys.occupancy import H100 as H100_SM
from aisys.simt.analysis import SECTOR, WARP

from ..card import Ask, Choice, Number, Several, card

PAGE = "02-gpu-programming/memory"
PROFILING = "02-gpu-programming/triton-roofline"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
FLOAT = int(bytes_per_element("fp32"))
FLOAT4 = 4 * FLOAT  # a float4: four float32 in one 16-byte access


def sectors(first: int, stride: int, size: int = FLOAT) -> int:
    """Distinct 32-byte sectors a warp touches when lane i reads `size` bytes at element first + stride * i."""
    return len({(first + stride * lane) * size // SECTOR for lane in range(WARP)}
               | {((first + stride * lane) * size + size - 1) // SECTOR for lane in range(WARP)})


@card(topic="memory access", difficulty="easy", frequency="high", page=PAGE)
def coalesced_warp_sectors():
    count = sectors(0, 1)
    return Ask(
        "Lane i of a warp reads float32 x[i] from global memory (x aligned). How many 32-byte sectors does the "
        "load touch?",
        Number(count, rel=0.01, unit="sectors"),
        f"{WARP} lanes x {FLOAT} bytes = {WARP * FLOAT} consecutive bytes, {count} sectors of {SECTOR} bytes (one "
        f"{SECTOR * count}-byte cache line): every byte fetched is used. This is a coalesced access, and "
        f"Nsight Compute's sectors per request for it is {count}.")


@card(topic="memory access", difficulty="medium", frequency="high", page=PAGE)
def stride_two_efficiency():
    count, ideal = sectors(0, 2), sectors(0, 1)
    return Ask(
        "Lane i of a warp reads float32 x[2 * i]. What fraction of the bytes fetched from memory does the warp "
        "use (in %)?",
        Number(100 * ideal / count, rel=0.01, unit="%"),
        f"The {WARP} values are spread over {2 * WARP * FLOAT} bytes: {count} sectors of {SECTOR} bytes, where "
        f"{WARP * FLOAT} bytes would fit in {ideal}. Half of each sector is fetched for nothing: "
        f"{prose.percent(ideal, count)} efficiency, and a memory-bound kernel runs at about that fraction of its "
        "speed.")


@card(topic="memory access", difficulty="medium", frequency="medium", page=PAGE)
def large_stride_bytes_moved():
    stride = SECTOR // FLOAT
    count = sectors(0, stride)
    return Ask(
        f"Lane i of a warp reads float32 x[{stride} * i]. How many bytes cross from memory for the {WARP * FLOAT} "
        "bytes the warp uses?",
        Number(count * SECTOR, rel=0.01, unit="bytes"),
        f"With a stride of {stride} floats ({stride * FLOAT} bytes) every lane's value lies in a sector of its own: "
        f"{count} sectors x {SECTOR} bytes = {count * SECTOR} bytes moved for {WARP * FLOAT} used, "
        f"{prose.percent(WARP * FLOAT, count * SECTOR, 1)}. Any larger stride is no worse: the sector is the unit.")


@card(topic="memory access", difficulty="hard", frequency="medium", page=PAGE)
def misaligned_warp_sectors():
    count = sectors(1, 1)
    return Ask(
        "x is aligned to 128 bytes. Lane i of a warp reads float32 x[i + 1] (the window is shifted by one "
        "element). How many 32-byte sectors does the load touch?",
        Number(count, rel=0.01, unit="sectors"),
        f"The {WARP * FLOAT} bytes start {FLOAT} bytes into a sector, so they straddle {count} sectors instead of "
        f"{sectors(0, 1)}: efficiency {prose.percent(sectors(0, 1), count)}. A misaligned window costs one extra "
        f"sector per warp, much less than a stride does; Nsight Compute shows {count} sectors per request where "
        f"{sectors(0, 1)} would do.")


@card(topic="memory access", difficulty="easy", frequency="high", page=PAGE)
def why_float4_loads():
    options = ("four times fewer load instructions for the same bytes",
               "more bytes in flight per thread, so fewer threads cover the memory latency",
               "the address must be 16-byte aligned",
               "it raises the HBM's peak bandwidth",
               "it removes every shared-memory bank conflict")
    return Ask(
        "Why do memory-bound CUDA kernels load float4 instead of float? Which statements are true?",
        Several(options, frozenset({0, 1, 2})),
        f"One float4 load moves {FLOAT4} bytes per lane, {WARP * FLOAT4} per warp instruction, where a float load "
        f"moves {FLOAT}: {FLOAT4 // FLOAT}x fewer load instructions and address computations for the same data, "
        "and each thread keeps four times the bytes outstanding, which Little's law needs to reach full "
        "bandwidth. It requires 16-byte alignment (reinterpret_cast<float4*> on an unaligned pointer faults). It "
        "cannot raise the memory's peak, only get closer to it, and shared-memory conflicts depend on the "
        "pattern, not the width.")


@card(topic="memory access", difficulty="easy", frequency="medium", page=PAGE)
def float4_load_instructions():
    n = 2**24
    plain, vector = n // WARP, n * FLOAT // FLOAT4 // WARP
    return Ask(
        "A kernel copies 2^24 float32 values, one thread per float4. How many warp-level load instructions does "
        "it issue?",
        Number(vector, rel=0.01, unit="instructions"),
        f"Each thread loads one float4 ({FLOAT4} bytes, {FLOAT4 // FLOAT} floats): 2^24 / {FLOAT4 // FLOAT} = "
        f"{n * FLOAT // FLOAT4:,} threads, in warps of {WARP}: {vector:,} warp instructions. With one float per "
        f"thread it would be {plain:,}, {plain // vector}x as many.")


@card(topic="memory access", difficulty="hard", frequency="medium", page=PAGE)
def littles_law_float4():
    in_flight = H100_SM.sms * H100_SM.max_threads_per_sm * FLOAT4
    latency = in_flight / H100.memory_bandwidth
    return Ask(
        "Every thread of a fully occupied H100 SXM5 has one float4 load outstanding. By Little's law, what is the "
        "longest memory latency that still lets HBM run at its peak bandwidth (in ns)?",
        Number(latency * 10**9, rel=0.03, unit="ns"),
        f"Little's law: bytes in flight = latency x bandwidth. In flight: {H100_SM.sms} SMs x "
        f"{H100_SM.max_threads_per_sm:,} threads x {FLOAT4} bytes = {prose.rate(in_flight, 'B')}. Divided by "
        f"{prose.rate(H100.memory_bandwidth, 'B/s')}: {prose.duration(latency)}. With one float per thread it is "
        f"a quarter, {prose.duration(latency / (FLOAT4 // FLOAT))}, about what one load that misses both caches "
        "takes (the page measures it): no margin. Hence vector loads, several loads in flight per thread, or "
        "asynchronous copies.")


@card(topic="memory access", difficulty="medium", frequency="medium", page=PROFILING)
def ncu_dram_metric():
    options = ("dram__bytes_read.sum", "l1tex__t_sector_hit_rate.pct", "lts__t_sectors_op_read.sum",
               "smsp__inst_executed.sum")
    return Ask(
        "In Nsight Compute, which metric counts the bytes a kernel actually read from HBM (device memory)?",
        Choice(options, 0),
        "dram__bytes_read.sum is what crossed from DRAM (HBM): divide by the kernel's time and compare with the "
        f"datasheet's {prose.rate(H100.memory_bandwidth, 'B/s')} for its memory-bandwidth utilisation. "
        "lts__t_sectors_* count requests to L2 (hits included), l1tex__t_sector_hit_rate.pct is the L1 hit rate "
        "by sectors, and smsp__inst_executed counts instructions. The gap between L2 traffic and DRAM bytes is "
        "what L2 saved.")


@card(topic="memory access", difficulty="hard", frequency="medium", page=PROFILING)
def ncu_sectors_per_request_double():
    size = int(bytes_per_element("fp64"))
    count = sectors(0, 1, size)
    return Ask(
        "Lane i of a warp reads float64 x[i] (consecutive doubles, aligned). What does Nsight Compute report as "
        "global-load sectors per request (l1tex__t_sectors... / l1tex__t_requests...)?",
        Number(count, rel=0.01, unit="sectors/request"),
        f"One request is one warp instruction: {WARP} x {size} bytes = {WARP * size} bytes = {count} sectors of "
        f"{SECTOR}. Every byte is used, so this is perfectly coalesced although the ratio is twice float32's "
        f"{sectors(0, 1)}: compare sectors per request with the bytes the warp needs (/{SECTOR}), not with a fixed "
        "number.")


@card(topic="memory access", difficulty="medium", frequency="low", page=PROFILING)
def l1_hit_rate_of_a_stream():
    options = ("it is a bug: the kernel's loads are not coalesced",
               "it is expected: each byte is read once, so there is nothing for L1 to hit",
               "L1 is disabled on Hopper for global loads",
               "the kernel must be using too much shared memory")
    return Ask(
        "Nsight Compute reports an L1 hit rate near 0% for a vector-add kernel (z = x + y, each element read "
        "once). What does that mean?",
        Choice(options, 1),
        "A cache helps only when data is reused. A streaming kernel touches every byte once, so L1 (and L2) hit "
        "rates near zero are normal; its figure of merit is DRAM throughput against the peak "
        f"({prose.rate(H100.memory_bandwidth, 'B/s')} on an H100). A low hit rate matters in a kernel that "
        "re-reads data (a stencil, a GEMM without shared-memory tiling).")


@card(topic="memory access", difficulty="easy", frequency="medium", page=PROFILING)
def achieved_bandwidth_fraction():
    moved, microseconds = 2**30, 400
    rate = moved / (microseconds / 10**6)
    return Ask(
        f"A kernel on an H100 SXM5 shows dram__bytes_read.sum = 1 GiB and takes {microseconds} µs, writing "
        "nothing significant. What fraction of the datasheet's HBM bandwidth did it reach (in %)?",
        Number(100 * rate / H100.memory_bandwidth, rel=0.02, unit="%"),
        f"{prose.rate(moved, 'B')} / {microseconds} µs = {prose.rate(rate, 'B/s')}, "
        f"{prose.percent(rate, H100.memory_bandwidth)} of {prose.rate(H100.memory_bandwidth, 'B/s')}. Reads of a "
        "large buffer get close to the datasheet; a kernel far below it is latency-bound (too few bytes in "
        "flight) or wastes sectors.")
