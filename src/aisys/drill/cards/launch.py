"""Launches, streams, CUDA graphs and double buffering: how work reaches the GPU and how copies overlap compute."""

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.gemm_tiling import H100_SHARED_MEMORY_PER_BLOCK, Tiling, resources
from aisys.hardware import CHIPS
from aisys.inference.cost import step_seconds
from aisys.inference.model import LLAMA_2_7B
from aisys.interconnect import LINKS
from aisys.roofline import elementwise

from ..card import Ask, Choice, Number, Several, card

LAUNCH = "02-gpu-programming/launch-path"
TILING = "03-tensor-cores/tiling"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
KIB = 1024


@card(topic="gpu programming", difficulty="easy", frequency="medium", page=LAUNCH)
def kernel_launch_is_asynchronous():
    options = ("when the kernel has finished running",
               "at once: the launch is queued on a stream and the host goes on",
               "when the kernel's first block starts on an SM",
               "after the next cudaMemcpy")
    return Ask(
        "When does a CUDA kernel launch return control to the host?",
        Choice(options, 1),
        "cuLaunchKernel packs the arguments and appends a command to a stream, a queue the GPU reads; the call "
        "returns immediately. The host waits only when it asks for a result: a device-to-host copy (which "
        "synchronises with the stream), cudaStreamSynchronize or cudaDeviceSynchronize. That is why timing a "
        "kernel with the host clock without a synchronisation measures only the launch.")


@card(topic="gpu programming", difficulty="medium", frequency="high", page=LAUNCH)
def legacy_default_stream():
    options = ("it runs kernels at a lower priority than other streams",
               "work on it waits for, and blocks, work on every other blocking stream of the device",
               "it cannot run copies",
               "it is per thread, so two host threads cannot share it")
    return Ask(
        "What is the trouble with CUDA's legacy default stream (stream 0)?",
        Choice(options, 1),
        "The legacy default stream synchronises with all other blocking streams: an operation on it starts only "
        "after earlier work on every stream finishes, and later work on the others waits for it. One stray "
        "launch or copy on stream 0 serialises a program built to overlap. Fixes: create non-blocking streams "
        "(cudaStreamNonBlocking) or compile with --default-stream per-thread, which gives each host thread an "
        "ordinary stream of its own.")


@card(topic="gpu programming", difficulty="easy", frequency="medium", page=LAUNCH)
def pinned_memory_for_async_copies():
    options = ("pinned memory is faster to allocate",
               "the copy engine reads host memory by DMA, which needs pages the OS cannot move; pageable memory is "
               "first staged through a pinned buffer by the driver, and the copy is not asynchronous",
               "pinned memory lives on the GPU",
               "cudaMemcpyAsync refuses pageable memory")
    return Ask(
        "Why must host buffers be pinned (page-locked, cudaMallocHost) for cudaMemcpyAsync to overlap with "
        "kernels?",
        Choice(options, 1),
        "The GPU's copy engines move data by DMA over PCIe or NVLink-C2C, which needs physical pages that stay "
        "put. From pageable memory the driver copies through a pinned staging buffer and the call returns only "
        "when the host side is done, so nothing overlaps. Pinning too much starves the OS of movable memory; "
        f"pinned copies also run at close to the link's rate ({prose.rate(LINKS['PCIe 5.0 x16'].bandwidth, 'B/s')} "
        "per direction for PCIe 5.0 x16).")


@card(topic="gpu programming", difficulty="hard", frequency="medium", page=LAUNCH)
def stream_pipeline_time():
    n, chunks = 2**28, 8  # float32 elements, and the pieces copied and computed on in turn
    pcie = LINKS["PCIe 5.0 x16"].bandwidth
    cost = elementwise(n, "fp32")  # y = 2 x on the GPU: read and write
    data = n * bytes_per_element("fp32")
    copy, kernel = data / pcie, cost.bytes / H100.memory_bandwidth
    serial = 2 * copy + kernel
    piece = (copy / chunks, kernel / chunks, copy / chunks)
    pipelined = sum(piece) + (chunks - 1) * max(piece)
    return Ask(
        f"A program copies {prose.rate(data, 'B')} of float32 from pinned host memory to an H100 over PCIe 5.0 "
        f"x16, doubles it in a kernel and copies it back. Split into {chunks} chunks on separate streams so that "
        "the copy in, the kernel and the copy out of different chunks overlap, how long does it take at the "
        "roofline's speeds (in ms)?",
        Number(pipelined * 10**3, rel=0.05, unit="ms"),
        f"Whole: copy in {prose.duration(copy)} at {prose.rate(pcie, 'B/s')}, kernel {prose.duration(kernel)} "
        f"({prose.rate(cost.bytes, 'B')} at {prose.rate(H100.memory_bandwidth, 'B/s')}), copy out "
        f"{prose.duration(copy)}: {prose.duration(serial)} in sequence. The GPU has separate copy engines for "
        "each direction, so in a pipeline the slowest stage sets the pace: one chunk's three stages, "
        f"{prose.duration(sum(piece))}, then {chunks - 1} more chunks at {prose.duration(max(piece))} each: "
        f"{prose.duration(pipelined)}, {prose.time_against(pipelined, serial, 'the serial version')}. The two "
        "copies overlap each other; the kernel hardly matters.")


@card(topic="gpu programming", difficulty="medium", frequency="high", page=LAUNCH)
def what_cuda_graphs_save():
    options = ("the host's per-launch cost: argument packing, driver calls, the runtime's bookkeeping",
               "the gaps between short kernels while the GPU waits for the host",
               "the execution time of a large, compute-bound kernel",
               "the need for fixed shapes and buffer addresses",
               "validation and setup of each launch, done once when the graph is instantiated")
    return Ask(
        "What does capturing a sequence of kernels into a CUDA graph and replaying it save?",
        Several(options, frozenset({0, 1, 4})),
        "A graph records the kernels, their arguments and dependencies once; instantiating it does the "
        "validation and setup, and a replay submits the whole sequence with one call. That removes the host's "
        "cost per kernel and the idle gaps it leaves between short kernels, which dominate when kernels run for "
        "microseconds (a decode step). It does nothing for a kernel's own run time, and the price is rigidity: "
        "the captured shapes and addresses are fixed, so engines capture one graph per batch size and keep "
        "buffers static.")


@card(topic="inference", difficulty="hard", frequency="medium", page="07-inference/prefill-decode")
def decode_kernel_duration():
    kernels_per_layer = 10
    cached = 1024
    seconds = step_seconds(LLAMA_2_7B, [(1, cached)], H100)
    kernels = kernels_per_layer * LLAMA_2_7B.n_layers
    return Ask(
        f"A decode step of Llama-2-7B in BF16 (batch 1, {cached} cached tokens) on an H100 SXM5 launches about "
        f"{kernels_per_layer} kernels per layer. At the roofline's speed, how long does the average kernel run "
        "(in µs)?",
        Number(seconds / kernels * 10**6, rel=0.05, unit="µs"),
        f"Batch-1 decode reads every weight and the cache once per step: the roofline puts the step at "
        f"{prose.duration(seconds)}. Over {kernels_per_layer} x {LLAMA_2_7B.n_layers} = {kernels} kernels that is "
        f"{prose.duration(seconds / kernels)} each, the same order as the host's cost of one launch from Python: "
        "launched one by one, the GPU would idle between kernels. Engines capture decode in CUDA graphs.")


@card(topic="gpu programming", difficulty="easy", frequency="high", page=TILING)
def why_double_buffering():
    options = ("to load the next tile from global memory while the current one is being computed on",
               "to keep two copies of the output for error checking",
               "to halve the shared memory a block needs",
               "to avoid bank conflicts between loads and stores")
    return Ask(
        "Why do GEMM and attention kernels double-buffer their shared-memory tiles?",
        Choice(options, 0),
        "With one buffer a block loads a tile, waits, computes, and loads again: the memory system and the math "
        "units take turns. With two (or more: stages) the block issues the asynchronous copy (cp.async, TMA) of "
        "tile k + 1 before computing on tile k, so loads overlap compute and the latency is hidden. The cost is "
        "the shared memory of each extra stage, which can lower occupancy.")


@card(topic="matmul", difficulty="medium", frequency="high", page=TILING)
def double_buffer_shared_memory():
    tiling = Tiling(BM=128, BN=128, BK=32, WM=64, WN=64, TM=16, TN=8, stages=2)
    used, size = resources(tiling, "bf16"), bytes_per_element("bf16")
    slab = (tiling.BM * tiling.BK + tiling.BK * tiling.BN) * size
    return Ask(
        f"A BF16 GEMM block computes a {tiling.BM} x {tiling.BN} tile of C, stepping through K by "
        f"{tiling.BK}, with two stages (double buffering) of its A and B slabs in shared memory. How much shared "
        "memory does the block need, in KiB?",
        Number(used.shared_memory / KIB, rel=0.01, unit="KiB"),
        f"One stage is a {tiling.BM} x {tiling.BK} slab of A and a {tiling.BK} x {tiling.BN} slab of B: "
        f"({tiling.BM * tiling.BK:,} + {tiling.BK * tiling.BN:,}) elements x {size:g} bytes = {slab / KIB:.0f} KiB. "
        f"Two stages: {used.shared_memory / KIB:.0f} KiB, of the {H100_SHARED_MEMORY_PER_BLOCK // KIB} KiB a block may "
        "use on an H100.")


@card(topic="matmul", difficulty="hard", frequency="low", page=TILING)
def stages_that_fit():
    one = Tiling(BM=128, BN=256, BK=64, WM=64, WN=128, TM=16, TN=8, stages=1)
    per_stage = resources(one, "bf16").shared_memory
    stages = int(H100_SHARED_MEMORY_PER_BLOCK // per_stage)
    return Ask(
        f"A BF16 GEMM block uses a {one.BM} x {one.BN} tile of C and BK = {one.BK}. At most how many stages of its "
        "A and B slabs fit in the shared memory one H100 block may use?",
        Number(stages, rel=0.01, unit="stages"),
        f"A stage is ({one.BM} x {one.BK} + {one.BK} x {one.BN}) x {bytes_per_element('bf16'):g} bytes = "
        f"{per_stage / KIB:.0f} KiB. {H100_SHARED_MEMORY_PER_BLOCK // KIB} KiB // {per_stage / KIB:.0f} KiB = "
        f"{stages} stages. More stages hide more latency but leave no shared memory for a second block or for "
        "staging C in the epilogue.")
