"""Occupancy: how many thread blocks of a kernel fit on one streaming multiprocessor (SM) at once.

An SM holds a block only when it has room for all of the block's warps, registers and shared
memory; occupancy is the number of resident warps over the most the SM can hold. The
arithmetic follows the CUDA Occupancy Calculator (`cuda_occupancy.h` in the CUDA toolkit),
which `cudaOccupancyMaxActiveBlocksPerMultiprocessor` implements; the limits per compute
capability are those of the CUDA C++ Programming Guide's table of technical specifications.
"""

from dataclasses import dataclass

from ._validate import nonnegative_int, positive_int

KIB = 1024


@dataclass(frozen=True)
class SMLimits:
    name: str
    compute_capability: tuple
    sms: int  # SMs on the chip
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int  # 32-bit registers
    max_registers_per_block: int
    max_registers_per_thread: int
    register_allocation_unit: int  # registers are given to a warp in multiples of this
    sub_partitions: int  # warp schedulers per SM; each owns a quarter of the register file
    shared_per_sm: int  # bytes, with the largest shared-memory carveout of L1
    shared_per_block: int  # bytes a block may use without opting in (static allocations stop here)
    shared_per_block_optin: int  # bytes a block may use after cudaFuncSetAttribute
    reserved_shared_per_block: int  # bytes the CUDA runtime keeps in every block (since Ampere)
    shared_allocation_unit: int  # bytes
    source: str
    warp_size: int = 32

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


H100 = SMLimits(
    name="NVIDIA H100 SXM5 (compute capability 9.0)", compute_capability=(9, 0), sms=132,
    max_threads_per_block=1024, max_threads_per_sm=2048, max_blocks_per_sm=32,
    registers_per_sm=64 * KIB, max_registers_per_block=64 * KIB, max_registers_per_thread=255,
    register_allocation_unit=256, sub_partitions=4,
    shared_per_sm=228 * KIB, shared_per_block=48 * KIB, shared_per_block_optin=227 * KIB,
    reserved_shared_per_block=1 * KIB, shared_allocation_unit=128,
    source="CUDA C++ Programming Guide, 'Technical Specifications per Compute Capability' (9.0); "
           "NVIDIA H100 Tensor Core GPU Architecture whitepaper (132 SMs on H100 SXM5); "
           "allocation units from cuda_occupancy.h (CUDA 12/13).",
)

A100 = SMLimits(
    name="NVIDIA A100 (compute capability 8.0)", compute_capability=(8, 0), sms=108,
    max_threads_per_block=1024, max_threads_per_sm=2048, max_blocks_per_sm=32,
    registers_per_sm=64 * KIB, max_registers_per_block=64 * KIB, max_registers_per_thread=255,
    register_allocation_unit=256, sub_partitions=4,
    shared_per_sm=164 * KIB, shared_per_block=48 * KIB, shared_per_block_optin=163 * KIB,
    reserved_shared_per_block=1 * KIB, shared_allocation_unit=128,
    source="CUDA C++ Programming Guide, 'Technical Specifications per Compute Capability' (8.0); "
           "NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs); allocation units from cuda_occupancy.h.",
)


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float  # resident warps / the most the SM can hold
    limiter: str  # which resource stops one more block from fitting
    blocks_by_limit: dict  # "threads", "blocks", "registers", "shared memory" -> the blocks each allows


def occupancy(threads_per_block: int, registers_per_thread: int, shared_per_block: int = 0,
              sm: SMLimits = H100) -> Occupancy:
    """How many blocks of `threads_per_block` threads, each thread using `registers_per_thread`
    registers (as `ptxas -v` reports) and each block `shared_per_block` bytes of shared memory,
    are resident on one SM of `sm` at once. A block that cannot be launched at all gives 0
    blocks, with the reason in `limiter`."""
    threads = positive_int("threads_per_block", threads_per_block)
    registers = nonnegative_int("registers_per_thread", registers_per_thread)
    shared = nonnegative_int("shared_per_block", shared_per_block)
    if not isinstance(sm, SMLimits):
        raise TypeError(f"sm must be an SMLimits such as occupancy.H100, got {sm!r}")

    warps = -(-threads // sm.warp_size)  # a partial warp still takes a whole warp's slot
    # Registers go to warps in units of 256 (8 per thread), and each of the SM's four
    # sub-partitions owns a quarter of the register file: a warp lives in one of them.
    registers_per_warp = _round_up(registers * sm.warp_size, sm.register_allocation_unit)
    if registers > sm.max_registers_per_thread:
        by_registers = 0
    elif registers_per_warp == 0:
        by_registers = sm.max_blocks_per_sm
    elif registers_per_warp * _round_up(warps, sm.sub_partitions) > sm.max_registers_per_block:
        by_registers = 0
    else:
        warps_per_partition = (sm.registers_per_sm // sm.sub_partitions) // registers_per_warp
        by_registers = warps_per_partition * sm.sub_partitions // warps
    # Shared memory goes to blocks in units of 128 bytes, plus 1 KB the runtime reserves.
    shared_allocated = _round_up(shared + sm.reserved_shared_per_block, sm.shared_allocation_unit)
    by_shared = 0 if shared > sm.shared_per_block_optin else sm.shared_per_sm // shared_allocated
    by_threads = 0 if threads > sm.max_threads_per_block else sm.max_warps_per_sm // warps
    limits = {"threads": by_threads, "blocks": sm.max_blocks_per_sm, "registers": by_registers,
              "shared memory": by_shared}
    blocks = min(limits.values())
    limiter = next(name for name, allowed in limits.items() if allowed == blocks)  # ties: the first named
    return Occupancy(blocks_per_sm=blocks, warps_per_sm=blocks * warps,
                     occupancy=blocks * warps / sm.max_warps_per_sm, limiter=limiter, blocks_by_limit=limits)


def max_potential_block_size(registers_per_thread: int, shared_per_block: int = 0, sm: SMLimits = H100) -> tuple:
    """(smallest grid that fills every SM, block size): the largest multiple of 32 threads that
    reaches the highest occupancy, as `cudaOccupancyMaxPotentialBlockSize` chooses."""
    best_threads, best_blocks, best = 0, 0, -1
    for threads in range(sm.max_threads_per_block, 0, -sm.warp_size):
        result = occupancy(threads, registers_per_thread, shared_per_block, sm)
        if result.blocks_per_sm * threads > best:
            best_threads, best_blocks, best = threads, result.blocks_per_sm, result.blocks_per_sm * threads
        if best == sm.max_threads_per_sm:
            break
    return best_blocks * sm.sms, best_threads
