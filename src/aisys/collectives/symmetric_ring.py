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
"""

import os
import warnings

import torch
import torch.distributed as dist

from .._validate import positive_int
from .ring import _reduction, chunk_bounds


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

    def __init__(self, buffer: torch.Tensor, previous: torch.Tensor, rank: int, world_size: int, barrier):
        self.buffer, self.previous, self.rank, self.world_size = buffer, previous, rank, world_size
        self.barrier = barrier
        self.bounds = chunk_bounds(buffer.numel(), world_size)

    @classmethod
    def on_gpus(cls, numel: int, dtype: torch.dtype = torch.float32, group=None) -> "SymmetricRing":
        """The buffer in PyTorch's symmetric memory on this rank's GPU, the predecessor's mapped into this process
        (over NVLink between GPUs of one host). Needs torch.distributed initialised with NCCL, one GPU a rank."""
        import torch.distributed._symmetric_memory as symm_mem

        numel = positive_int("numel", numel)
        _require_floating(dtype)
        if not torch.cuda.is_available():
            raise RuntimeError("SymmetricRing.on_gpus needs CUDA GPUs (symmetric memory maps GPU memory); "
                               "on the CPU use SymmetricRing.in_files")
        group = group or dist.group.WORLD
        if hasattr(symm_mem, "enable_symm_mem_for_group"):  # older torch needs it; newer deprecates it
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(group.group_name)
        buffer = symm_mem.empty(numel, dtype=dtype, device=torch.device("cuda", torch.cuda.current_device()))
        handle = symm_mem.rendezvous(buffer, group.group_name)
        rank, p = handle.rank, handle.world_size
        previous = handle.get_buffer((rank - 1) % p, (numel,), dtype)
        return cls(buffer, previous, rank, p, lambda: handle.barrier(channel=0))

    @classmethod
    def in_files(cls, numel: int, folder, dtype: torch.dtype = torch.float32, group=None) -> "SymmetricRing":
        """The buffer a shared mapping of `folder`/rank<r>.bin, the predecessor's file mapped too, and a
        process-group barrier (gloo) between steps: the ring on CPU processes of one machine. `folder`: an empty
        directory of this ring's own."""
        numel = positive_int("numel", numel)
        _require_floating(dtype)
        folder = os.fspath(folder)
        if not os.path.isdir(folder):
            raise ValueError(f"folder must be an existing directory all ranks can write, got {folder!r}")
        group = group or dist.group.WORLD
        rank, p = dist.get_rank(group), dist.get_world_size(group)
        nbytes = numel * torch.empty((), dtype=dtype).element_size()

        def mapped(r):
            return torch.from_file(os.path.join(folder, f"rank{r}.bin"), shared=True, size=numel, dtype=dtype)

        try:  # a file of another ring would be resized under the processes that map it
            with open(os.path.join(folder, f"rank{rank}.bin"), "xb") as file:
                file.truncate(nbytes)
        except FileExistsError:
            raise ValueError(f"folder {folder!r} already holds rank {rank}'s buffer: each ring needs a folder of its "
                             "own") from None
        buffer = mapped(rank)
        dist.barrier(group=group)  # every rank's file exists before any maps its predecessor's
        return cls(buffer, mapped((rank - 1) % p), rank, p, lambda: dist.barrier(group=group))

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

    def _chunk(self, tensor: torch.Tensor, c: int) -> torch.Tensor:
        start, stop = self.bounds[c]
        return tensor[start:stop]


def _require_floating(dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
