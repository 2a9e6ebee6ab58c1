"""The streaming multiprocessor: what one holds, and how threads, registers and shared memory bound the blocks
resident on it (aisys.occupancy, the CUDA occupancy calculator's arithmetic)."""

from aisys.gemm_tiling import REGISTER_BYTES
from aisys.hardware import peak_formula
from aisys.occupancy import A100, H100, KIB, max_potential_block_size, occupancy

from ..card import Ask, Choice, Number, Several, card

OCCUPANCY = "02-gpu-programming/divergence-occupancy"
SM_PAGE = "02-gpu-programming/sm-warps-simt"
H100_CHIP, A100_CHIP = "NVIDIA H100 SXM5 80GB", "NVIDIA A100 SXM4 80GB"


def _allocated(registers: int) -> int:
    """Registers a thread is given: a warp's registers are allocated in units of H100.register_allocation_unit."""
    unit = H100.register_allocation_unit
    return -(-registers * H100.warp_size // unit) * unit // H100.warp_size


def _limits(result) -> str:
    return ", ".join(f"{name} {blocks}" for name, blocks in result.blocks_by_limit.items())


@card(topic="gpu programming", difficulty="easy", frequency="high", page=SM_PAGE)
def h100_sm_units():
    fp32, tensor = peak_formula(H100_CHIP, "fp32"), peak_formula(H100_CHIP, "bf16")
    a100_fp32, a100_tensor = peak_formula(A100_CHIP, "fp32"), peak_formula(A100_CHIP, "bf16")
    quarter = H100.sub_partitions
    options = (f"{a100_fp32.parts} FP32 cores and {a100_tensor.parts} Tensor Cores",
               f"{fp32.parts} FP32 cores and {tensor.parts} Tensor Cores",
               f"{fp32.parts // quarter} FP32 cores and {tensor.parts // quarter} Tensor Core",
               f"{2 * fp32.parts} FP32 cores and {2 * tensor.parts} Tensor Cores")
    return Ask(
        "How many FP32 cores and Tensor Cores does one SM of an H100 SXM5 have?",
        Choice(options, 1),
        f"An H100 SM is {quarter} processing blocks (sub-partitions), each with its own warp scheduler, "
        f"{fp32.parts // quarter} FP32 cores, {tensor.parts // quarter} Tensor Core and a quarter of the register "
        f"file: {fp32.parts} FP32 cores and {tensor.parts} Tensor Cores per SM, {fp32.units} SMs. "
        f"Peak FP32 is {fp32.explain()}. The A100 SM has {a100_fp32.parts} FP32 cores and {a100_tensor.parts} "
        f"Tensor Cores; the {fp32.parts // quarter}-and-{tensor.parts // quarter} option is one processing block.")


@card(topic="gpu programming", difficulty="easy", frequency="high", page=OCCUPANCY)
def h100_max_warps_per_sm():
    warps = H100.max_warps_per_sm
    return Ask(
        "At most how many warps can be resident on one SM of an H100 at once?",
        Number(warps, rel=0.01, unit="warps"),
        f"An H100 SM holds at most {H100.max_threads_per_sm:,} threads, in warps of {H100.warp_size}: "
        f"{H100.max_threads_per_sm:,} / {H100.warp_size} = {warps} warps. Occupancy is resident warps over "
        f"these {warps}. (Also at most {H100.max_blocks_per_sm} blocks, whatever their size.)")


@card(topic="gpu programming", difficulty="hard", frequency="high", page=OCCUPANCY)
def registers_for_full_occupancy():
    threads = 256
    most = max(r for r in range(1, H100.max_registers_per_thread + 1) if occupancy(threads, r).occupancy == 1)
    over = occupancy(threads, most + 1)
    return Ask(
        f"A kernel runs in blocks of {threads} threads with no shared memory. What is the largest number of "
        "registers per thread that still allows 100% occupancy on an H100?",
        Number(most, rel=0.01, unit="registers"),
        f"Full occupancy is {H100.max_threads_per_sm:,} threads per SM, sharing {H100.registers_per_sm:,} registers: "
        f"{H100.registers_per_sm:,} / {H100.max_threads_per_sm:,} = {most} per thread. One more register costs more "
        f"than one: registers go to a warp in units of {H100.register_allocation_unit} "
        f"({H100.register_allocation_unit // H100.warp_size} per thread), so {most + 1} is allocated as "
        f"{_allocated(most + 1)} and only {over.blocks_per_sm} blocks fit: occupancy {over.occupancy:.0%}, limited "
        f"by {over.limiter}.")


@card(topic="gpu programming", difficulty="medium", frequency="high", page=OCCUPANCY)
def occupancy_at_64_registers():
    threads, registers = 256, 64
    result = occupancy(threads, registers)
    warps_per_block = threads // H100.warp_size
    per_warp = registers * H100.warp_size
    return Ask(
        f"Blocks of {threads} threads, {registers} registers per thread, no shared memory: what occupancy does "
        "an H100 SM reach? (in %)",
        Number(100 * result.occupancy, rel=0.01, unit="%"),
        f"A warp needs {registers} x {H100.warp_size} = {per_warp:,} registers; the SM has {H100.registers_per_sm:,}, "
        f"so {H100.registers_per_sm // per_warp} warps fit, {result.blocks_per_sm} blocks of {warps_per_block} warps. "
        f"{result.warps_per_sm} of {H100.max_warps_per_sm} warps: occupancy {result.occupancy:.0%}, limited by "
        f"{result.limiter} (blocks each limit allows: {_limits(result)}).")


@card(topic="gpu programming", difficulty="hard", frequency="high", page=OCCUPANCY)
def occupancy_shared_memory_bound():
    threads, registers, shared = 128, 32, 48 * KIB
    result = occupancy(threads, registers, shared)
    allocated = shared + H100.reserved_shared_per_block
    return Ask(
        f"A kernel uses blocks of {threads} threads, {registers} registers per thread and {shared // KIB} KiB of "
        "shared memory per block. How many blocks are resident on one H100 SM?",
        Number(result.blocks_per_sm, rel=0.01, unit="blocks"),
        f"Each block takes {shared // KIB} KiB plus the {H100.reserved_shared_per_block // KIB} KiB the runtime "
        f"reserves: {allocated // KIB} KiB of the SM's {H100.shared_per_sm // KIB} KiB, so "
        f"{H100.shared_per_sm // KIB} // {allocated // KIB} = {result.blocks_per_sm} blocks. Threads would allow "
        f"{result.blocks_by_limit['threads']} and registers {result.blocks_by_limit['registers']}: shared memory is "
        f"the limiter, and occupancy is {result.warps_per_sm} warps of {H100.max_warps_per_sm}, "
        f"{result.occupancy:.0%}.")


@card(topic="gpu programming", difficulty="medium", frequency="medium", page=OCCUPANCY)
def occupancy_limiter_tiny_blocks():
    threads, registers = H100.warp_size, 16
    result = occupancy(threads, registers)
    names = ("threads", "blocks", "registers", "shared memory")
    options = ("the warp slots (threads per SM)", "the number of blocks per SM", "the register file",
               "shared memory")
    return Ask(
        f"A kernel is launched with blocks of {threads} threads, {registers} registers per thread, no shared "
        "memory. What limits its occupancy on an H100?",
        Choice(options, names.index(result.limiter)),
        f"Each block is one warp. The SM takes at most {H100.max_blocks_per_sm} blocks, so "
        f"{result.blocks_per_sm} warps of {H100.max_warps_per_sm}: occupancy {result.occupancy:.0%}, although "
        f"threads would allow {result.blocks_by_limit['threads']} blocks and registers "
        f"{result.blocks_by_limit['registers']}. Blocks of at least {2 * H100.warp_size} threads avoid this cap.")


@card(topic="gpu programming", difficulty="hard", frequency="medium", page=OCCUPANCY)
def too_many_registers_to_launch():
    threads, registers = H100.max_threads_per_block, 65
    result = occupancy(threads, registers)
    needed = _allocated(registers) * H100.warp_size
    options = ("it runs with one block per SM at 50% occupancy",
               "the compiler spills the extra registers and it runs at full occupancy",
               "the launch fails: too many resources requested for launch",
               "it runs with half of each block's warps waiting for registers")
    return Ask(
        f"A kernel compiled to {registers} registers per thread is launched with blocks of {threads} threads on "
        "an H100. What happens?",
        Choice(options, 2 if result.blocks_per_sm == 0 else 0),
        f"A block must fit on one SM whole. {threads // H100.warp_size} warps x {needed:,} registers "
        f"({registers} x {H100.warp_size}, rounded up to units of {H100.register_allocation_unit}) = "
        f"{threads // H100.warp_size * needed:,} registers, more than the {H100.max_registers_per_block:,} a block may "
        f"have: {result.blocks_per_sm} blocks fit and the launch fails. Spilling is decided at compile time "
        "(cap registers with __launch_bounds__ or -maxrregcount), not at launch.")


@card(topic="gpu programming", difficulty="easy", frequency="medium", page="02-gpu-programming/memory")
def h100_register_file_size():
    size = H100.registers_per_sm * REGISTER_BYTES
    return Ask(
        "How large is the register file of one H100 SM, in KiB?",
        Number(size // KIB, rel=0.01, unit="KiB"),
        f"{H100.registers_per_sm:,} 32-bit registers x {REGISTER_BYTES} bytes = {size // KIB} KiB per SM, more "
        f"than its {H100.shared_per_sm // KIB} KiB of shared memory; at most {H100.max_registers_per_thread} per "
        "thread.")


@card(topic="gpu programming", difficulty="easy", frequency="medium", page=SM_PAGE)
def h100_resident_threads():
    total = H100.sms * H100.max_threads_per_sm
    return Ask(
        "How many threads can be resident on a whole H100 SXM5 at once?",
        Number(total, rel=0.01, unit="threads"),
        f"{H100.sms} SMs x {H100.max_threads_per_sm:,} threads = {total:,}. A grid larger than this runs in waves; "
        "one much smaller leaves SMs idle.")


@card(topic="gpu programming", difficulty="hard", frequency="low", page=OCCUPANCY)
def max_potential_block_size_40_registers():
    registers = 40
    grid, block = max_potential_block_size(registers)
    best, full = occupancy(block, registers), occupancy(H100.max_threads_per_block, registers)
    per_warp = registers * H100.warp_size
    warps = H100.sub_partitions * (H100.registers_per_sm // H100.sub_partitions // per_warp)
    return Ask(
        f"A kernel uses {registers} registers per thread and no shared memory. Which block size does "
        "cudaOccupancyMaxPotentialBlockSize choose on an H100 (the largest that reaches the highest occupancy)?",
        Number(block, rel=0.01, unit="threads"),
        f"A warp needs {registers} x {H100.warp_size} = {per_warp:,} registers; each of the "
        f"{H100.sub_partitions} processing blocks owns {H100.registers_per_sm // H100.sub_partitions:,}, so "
        f"{warps} warps fit per SM. Blocks of {block} threads ({block // H100.warp_size} warps) fit "
        f"{best.blocks_per_sm} times: {best.warps_per_sm} warps, {best.occupancy:.0%}. Blocks of "
        f"{H100.max_threads_per_block} fit {full.blocks_per_sm} time: {full.occupancy:.0%}. The grid that fills "
        f"the GPU is {best.blocks_per_sm} x {H100.sms} = {grid} blocks.")


@card(topic="gpu programming", difficulty="medium", frequency="high", page="02-gpu-programming/shared-memory")
def shared_memory_or_registers():
    options = ("each thread's running sums (accumulators)",
               "a tile of a matrix that every thread of the block reads several times",
               "a block's histogram bins, updated with atomics by all its threads",
               "a thread's loop counter and indices",
               "a 32 x 33 tile used to transpose through the block",
               "a value only its own thread ever reads")
    return Ask(
        "Which of these belong in shared memory rather than in registers?",
        Several(options, frozenset({1, 2, 4})),
        "Shared memory is for data the threads of a block share: a tile reused by many threads (a GEMM's A and B "
        "slabs), bins every thread updates, a tile read back in another order (a transpose). What one thread owns "
        "and uses stays in registers: accumulators, counters, indices, private values. Both are per-SM resources: "
        f"{H100.registers_per_sm:,} registers and {H100.shared_per_sm // KIB} KiB on an H100, and the more a block "
        "takes, the fewer blocks are resident.")


@card(topic="gpu programming", difficulty="hard", frequency="medium", page=OCCUPANCY)
def occupancy_is_not_the_goal():
    options = ("independent instructions within a thread (ILP) hide latency as more warps would",
               "fast GEMM kernels often run with few warps per SM and many registers per thread",
               "100% occupancy is always the fastest configuration",
               "occupancy is resident blocks over the maximum blocks per SM",
               "a kernel that stalls on memory latency with nothing else to issue benefits from more occupancy")
    return Ask(
        "Which statements about occupancy are true?",
        Several(options, frozenset({0, 1, 4})),
        f"Occupancy is resident warps over the most an SM holds ({H100.max_warps_per_sm} on an H100), not blocks. "
        "It is a means to hide latency: a warp with independent instructions keeps issuing without waiting, so "
        "ILP hides latency too. Volkov's 'Better performance at lower occupancy' showed libraries getting faster "
        "at half the occupancy, by giving each thread more registers to hold several results; Hopper GEMMs run a "
        "few warps per SM. Raise occupancy when warps stall with nothing else to issue.")


@card(topic="gpu programming", difficulty="easy", frequency="low", page="02-gpu-programming/memory")
def h100_shared_memory_per_sm():
    return Ask(
        "How much shared memory can one H100 SM give its blocks (with the largest carve-out), in KiB?",
        Number(H100.shared_per_sm // KIB, rel=0.01, unit="KiB"),
        f"{H100.shared_per_sm // KIB} KiB per SM, of which one block may use {H100.shared_per_block_optin // KIB} "
        f"KiB after opting in (cudaFuncSetAttribute), {H100.shared_per_block // KIB} KiB without. Shared memory and "
        f"L1 are one array; what shared memory leaves is L1 cache. An A100 SM has {A100.shared_per_sm // KIB} KiB.")
