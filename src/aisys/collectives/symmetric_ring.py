"""The ring all-reduce with the transfer and the addition in one kernel: each rank reads its predecessor's chunk
straight out of the predecessor's memory and reduces it into its own.

`ring.py` and `pipelined_ring.py` move a chunk with a send and a receive: NCCL copies it into a slot of the
receiver, and a second kernel reads the slot back from memory to add it. Where every GPU can address every
other's memory (NVLink peers, PyTorch's symmetric memory), the two are one kernel. At reduce-scatter step s
rank r runs, as ring.py's step does,

    mine[c] += previous[c],   c = (r - s - 1) mod p

with `previous` the buffer of rank r - 1 read over NVLink, and all-gather step s copies previous[(r - s) mod p].
No slot, no message, no second pass over the chunk.

What replaces the messages' ordering is a barrier between steps (`SymmetricMemory.barrier`: a kernel on the
stream in which every rank signals every other and waits for their signals). Step s may read previous[c] only
once rank r - 1 has finished step s - 1, which wrote it; and rank r may overwrite its chunk only once rank r + 1
has finished reading it. Within one step no chunk is both written and read (`steps` lists them, and a test
checks it for every p), so one barrier between steps, one before the first (the inputs are written) and
one after the last (the neighbour has read what the caller may now overwrite) order everything: 2p - 1 in all.

The buffer is the one the ranks mapped into each other's address space, so the ring reduces it in place and
the caller fills it: `SymmetricRing.on_gpus(numel)` allocates it in symmetric memory and exchanges the mappings
(collective over the group). `SymmetricRing.in_files(numel, folder)` is the same ring on the CPU with each
rank's buffer a shared mapping of a file in `folder` and a process-group barrier between steps: the form in
which CPU machines run and test it.

`all_reduce_in_one_kernel` runs the same steps in one Triton kernel (aisys.triton_kernels.ring_all_reduce),
ordered by flags per slice that the neighbours write after the buffer, as NCCL's ring is, instead of barriers.
"""

import os
import warnings
from typing import NamedTuple

import torch
import torch.distributed as dist

from .._validate import positive_int
from ..triton_kernels import _tensors, ring_all_reduce
from .ring import _REDUCE, _reduction, chunk_bounds

# the kernel's OP for each of ring.py's in-place updates (both in ring.SUPPORTED_OPS's order)
_KERNEL_OPS = dict(zip(_REDUCE.values(), (ring_all_reduce.SUM, ring_all_reduce.PRODUCT, ring_all_reduce.MIN,
                                          ring_all_reduce.MAX)))


def steps(p: int, rank: int) -> list[tuple[str, int]]:
    """The ring's steps on `rank` of p, in order: (what it does, the chunk c it does it to), that is, "reduce":
    mine[c] op= previous[c] for the reduce-scatter's p - 1 steps, "copy": mine[c] = previous[c] for the
    all-gather's."""
    p = positive_int("p", p)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < p:
        raise ValueError(f"rank must be an integer in [0, {p}), got {rank!r}")
    return [("reduce", (rank - s - 1) % p) for s in range(p - 1)] + [("copy", (rank - s) % p) for s in range(p - 1)]


class SymmetricRing:
    """A buffer of `numel` elements that every rank of the group can read, and the ring all-reduce on it.

    Made with `on_gpus` or `in_files` (collective: every rank at the same point, with the same numel and dtype).
    Fill `ring.buffer`, call `ring.all_reduce()`: the buffer then holds the reduction over all ranks.
    """

    def __init__(self, buffer: torch.Tensor, previous: torch.Tensor, rank: int, world_size: int, barrier,
                 flags: "Flags"):
        self.buffer, self.previous, self.rank, self.world_size = buffer, previous, rank, world_size
        self.barrier, self.flags = barrier, flags
        self.bounds = chunk_bounds(buffer.numel(), world_size)
        self._kernel_calls = 0  # all_reduce_in_one_kernel's flags count on from each call's signals

    @classmethod
    def on_gpus(cls, numel: int, dtype: torch.dtype = torch.float32, group=None, slices: int | None = None
                ) -> "SymmetricRing":
        """The buffer in PyTorch's symmetric memory on this rank's GPU, the predecessor's mapped into this process
        (over NVLink between GPUs of one host). Needs torch.distributed initialised with NCCL, one GPU a rank.
        `slices`: all_reduce_in_one_kernel's programs, by default one per SM (all resident at once)."""
        import torch.distributed._symmetric_memory as symm_mem

        numel = positive_int("numel", numel)
        _require_floating(dtype)
        if slices is not None:
            slices = positive_int("slices", slices)
        if not torch.cuda.is_available():
            raise RuntimeError("SymmetricRing.on_gpus needs CUDA GPUs (symmetric memory maps GPU memory); "
                               "on the CPU use SymmetricRing.in_files")
        group = group or dist.group.WORLD
        if hasattr(symm_mem, "enable_symm_mem_for_group"):  # older torch needs it; newer deprecates it
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(group.group_name)
        device = torch.device("cuda", torch.cuda.current_device())
        slices = slices or torch.cuda.get_device_properties(device).multi_processor_count
        layout = _Layout(numel, dtype, slices)
        memory = symm_mem.empty(layout.nbytes, dtype=torch.uint8, device=device)
        handle = symm_mem.rendezvous(memory, group.group_name)
        rank, p = handle.rank, handle.world_size

        def flags_of(r):
            return handle.get_buffer(r, (2 * slices,), torch.int32, storage_offset=layout.flags_offset // 4)

        layout.flags(memory).zero_()
        handle.barrier(channel=0)  # every rank's flags are zero before any is signalled
        return cls(layout.buffer(memory), handle.get_buffer((rank - 1) % p, (numel,), dtype), rank, p,
                   lambda: handle.barrier(channel=0),
                   Flags(flags_of(rank), flags_of((rank + 1) % p), flags_of((rank - 1) % p)))

    @classmethod
    def in_files(cls, numel: int, folder, dtype: torch.dtype = torch.float32, group=None, slices: int = 2
                 ) -> "SymmetricRing":
        """The buffer a shared mapping of `folder`/rank<r>.bin, the predecessor's file mapped too, and a
        process-group barrier (gloo) between steps: the ring on CPU processes of one machine. `folder`: an empty
        directory of this ring's own. `slices`: all_reduce_in_one_kernel's programs (run one after another in
        Triton's interpreter)."""
        numel = positive_int("numel", numel)
        _require_floating(dtype)
        slices = positive_int("slices", slices)
        folder = os.fspath(folder)
        if not os.path.isdir(folder):
            raise ValueError(f"folder must be an existing directory all ranks can write, got {folder!r}")
        group = group or dist.group.WORLD
        rank, p = dist.get_rank(group), dist.get_world_size(group)
        layout = _Layout(numel, dtype, slices)

        def mapped(r):
            return torch.from_file(os.path.join(folder, f"rank{r}.bin"), shared=True, size=layout.nbytes,
                                   dtype=torch.uint8)

        try:  # a file of another ring would be resized under the processes that map it
            with open(os.path.join(folder, f"rank{rank}.bin"), "xb") as file:
                file.truncate(layout.nbytes)  # zeros: the flags start at 0
        except FileExistsError:
            raise ValueError(f"folder {folder!r} already holds rank {rank}'s buffer: each ring needs a folder of its "
                             "own") from None
        memory = mapped(rank)
        dist.barrier(group=group)  # every rank's file exists before any maps its predecessor's
        previous, following = mapped((rank - 1) % p), mapped((rank + 1) % p)
        return cls(layout.buffer(memory), layout.buffer(previous), rank, p, lambda: dist.barrier(group=group),
                   Flags(layout.flags(memory), layout.flags(following), layout.flags(previous)))

    def all_reduce(self, op=dist.ReduceOp.SUM) -> torch.Tensor:
        """Reduce `self.buffer` over all ranks in place (SUM, PRODUCT, MIN or MAX); returns it."""
        reduce = _reduction(op)
        self.barrier()  # every rank's input is written
        for kind, c in steps(self.world_size, self.rank):
            into, source = self._chunk(self.buffer, c), self._chunk(self.previous, c)
            if kind == "reduce":
                reduce(into, source)
            else:
                into.copy_(source)
            self.barrier()  # the neighbours' next step reads what this one wrote, and writes what it read
        return self.buffer

    def all_reduce_in_one_kernel(self, op=dist.ReduceOp.SUM) -> torch.Tensor:
        """The same reduction as `all_reduce`, bit for bit, in one launch of aisys.triton_kernels.ring_all_reduce:
        each slice ordered by its neighbours' flags instead of a barrier per step. Returns the buffer."""
        kernel_op = _KERNEL_OPS[_reduction(op)]  # ValueError for an op the ring lacks, on every rank
        if self.buffer.device.type == "cpu" and not _tensors.interpreted():
            raise RuntimeError("all_reduce_in_one_kernel on buffers in files needs Triton's interpreter: set "
                               "AISYS_DEVICE=cpu (or TRITON_INTERPRET=1) before triton is imported")
        p, numel = self.world_size, self.buffer.numel()
        if p == 1:
            return self.buffer
        base = self._kernel_calls * (2 * p - 1)  # the signals each program has sent in the calls before
        if base + 2 * p - 1 >= 2**31:
            raise RuntimeError(f"this ring's int32 flags have counted {self._kernel_calls} calls and would overflow "
                               "at the next: make a new SymmetricRing")
        self._kernel_calls += 1
        aligned = numel % (ring_all_reduce.ALIGNMENT.value * p) == 0
        ring_all_reduce.ring_all_reduce_kernel[(self.flags.slices,)](
            self.buffer, self.previous, self.flags.mine, self.flags.next, self.flags.previous, numel, p, self.rank,
            base, OP=kernel_op, ALIGNED=aligned, BLOCK=ring_all_reduce.BLOCK,
            num_warps=ring_all_reduce.NUM_WARPS)
        return self.buffer

    def _chunk(self, tensor: torch.Tensor, c: int) -> torch.Tensor:
        start, stop = self.bounds[c]
        return tensor[start:stop]


class Flags(NamedTuple):
    """A rank's flags (2 int32 a slice: what its predecessor and its successor have signalled) and its neighbours'."""

    mine: torch.Tensor
    next: torch.Tensor
    previous: torch.Tensor

    @property
    def slices(self) -> int:
        return self.mine.numel() // 2


class _Layout:
    """One rank's shared bytes: the buffer, then (16-byte aligned) its flags."""

    def __init__(self, numel: int, dtype: torch.dtype, slices: int):
        self.numel, self.dtype = numel, dtype
        self.flags_offset = -(-numel * dtype.itemsize // 16) * 16
        self.nbytes = self.flags_offset + 2 * slices * 4

    def buffer(self, memory: torch.Tensor) -> torch.Tensor:
        return memory[:self.numel * self.dtype.itemsize].view(self.dtype)

    def flags(self, memory: torch.Tensor) -> torch.Tensor:
        return memory[self.flags_offset:].view(torch.int32)


def _require_floating(dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
