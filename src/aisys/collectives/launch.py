"""Run a function on p real processes joined in one torch.distributed process group, and always clean up.

    results = run_ranks(fn, world_size=4, args=[(x0,), (x1,), (x2,), (x3,)])

forks `world_size` processes (gloo on CPU, with no GPU visible; NCCL with one GPU per rank), calls
`fn(*args[rank])` in each, and returns the per-rank results in rank order. Every
failure ends within seconds as a `RanksFailed` that says what each rank did: an
exception on some rank (the others are stopped), a rank that died (with the last
lines it wrote to standard error: gloo ends a process from C++, where Python sees
nothing), or a deadlock (ranks still running when `wall_timeout` ran out, or a
receive that waited longer than `timeout`). What the ranks write to standard error
reaches ours as they write it. No process outlives the call.

Fork, not spawn: a function defined in a notebook cell cannot be pickled by name,
and a forked child inherits it with everything the notebook defined before.
"""

import ctypes
import faulthandler
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import wait

from .._validate import one_of, positive_int, positive_number

BACKENDS = ("gloo", "nccl")
GRACE_AFTER_FAILURE = 2.0  # seconds the other ranks get to finish once one has failed
# Joining the group can fail for reasons that are nobody's code: on a loaded machine a connection of
# gloo's full mesh is refused or times out now and then (a few percent of starts on 2 busy cores).
# Such a start is started again; errors once the ranks have joined are never retried.
STARTS = 3
OUTPUT_LINES = 8  # of a rank that died, the last lines it wrote to standard error that its failure quotes
# What gloo writes when it ends a process, and what it means in the terms of a learner's code.
ABORTS = {"Received data size doesn't match expected size":
          "gloo ended it: a message arrived that is larger than the receive posted for it (a send and its receive "
          "must agree in number of elements and dtype)"}


@dataclass(frozen=True)
class Outcome:
    """What one rank did: status 'ok' (with its value), 'raised' (error text), 'startup' (it could not
    join the group), 'died' (with `output`, the last lines it wrote to standard error) or 'stopped'."""

    rank: int
    status: str
    value: object = None
    error: str = ""
    output: str = ""

    def describe(self, output: bool = True) -> str:
        """What the rank did, in a line, then (if `output`) the last lines it wrote where it died."""
        if self.status == "ok":
            return f"rank {self.rank} finished"
        if self.status == "raised":
            return f"rank {self.rank} raised {self.error}"
        if self.status == "startup":
            return f"rank {self.rank} could not join the process group: {self.error}"
        last = "".join(f"\n      {line}" for line in self.output.splitlines()) if output else ""
        return f"rank {self.rank} {self.error}" + (f"; the last it wrote:{last}" if last else "")


class RanksFailed(RuntimeError):
    """Some rank did not finish: `outcomes` holds one Outcome per rank, and the message says what each did,
    headed by the rank that failed first on its own account (`first`, its index; by default found from the
    errors)."""

    def __init__(self, outcomes: list[Outcome], first: int | None = None):
        self.outcomes = outcomes
        lines = [_summary(outcomes, first)] + [f"  {outcome.describe()}" for outcome in outcomes]
        super().__init__("\n".join(lines))


def run_ranks(fn, world_size: int, args=None, *, backend: str = "gloo", timeout: float = 10.0,
              wall_timeout: float = 60.0) -> list:
    """Call fn(*args[rank]) on `world_size` forked processes in one process group; their results in rank order.

    `args` is a list of one argument tuple per rank (None: no arguments). `timeout` bounds each
    communication call inside (a receive nobody sends to fails after it); `wall_timeout` bounds the
    whole run. Results travel back by pickle, so return tensors, arrays or plain values.
    """
    world_size = positive_int("world_size", world_size)
    backend = one_of("backend", backend, BACKENDS)
    timeout, wall_timeout = positive_number("timeout", timeout), positive_number("wall_timeout", wall_timeout)
    if args is None:
        args = [()] * world_size
    if not isinstance(args, (list, tuple)) or len(args) != world_size:
        raise ValueError(f"args must be a list of {world_size} argument tuples, one per rank; got "
                         f"{type(args).__name__} of length {len(args) if hasattr(args, '__len__') else '?'}")
    args = [tuple(a) if isinstance(a, (list, tuple)) else (a,) for a in args]
    _check_backend_usable(backend, world_size)
    return _launch(fn, world_size, args, backend, timeout, wall_timeout)


def _check_backend_usable(backend: str, world_size: int) -> None:
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this build of PyTorch")
    if backend == "nccl":
        if (count := torch.cuda.device_count()) < world_size:  # counted through NVML: does not initialise CUDA
            raise ValueError(f"backend 'nccl' needs one GPU per rank: world_size {world_size}, GPUs {count}")
        if torch.cuda.is_initialized():
            raise RuntimeError("CUDA is already initialised in this process, and a forked child cannot use it: "
                               "restart the kernel and start the ranks before anything touches the GPU")


def _launch(fn, world_size, args, backend, timeout, wall_timeout) -> list:
    """Start the ranks; start them again (at most STARTS times) when one failed to join the group."""
    for _ in range(STARTS):
        outcomes = _start(fn, world_size, args, backend, timeout, wall_timeout)
        if not any(o.status == "startup" for o in outcomes):
            break
    if any(o.status != "ok" for o in outcomes):
        raise RanksFailed(outcomes)
    return [o.value for o in outcomes]


def _start(fn, world_size, args, backend, timeout, wall_timeout) -> list[Outcome]:
    context = multiprocessing.get_context("fork")
    pipes, processes, output = [], [], _Output()
    # Rendezvous through a file, not a TCPStore: on the VMs this course runs on, about one TCP connect
    # to a fresh store in a hundred stalls for 5 s, which would fail a check for nothing the student did.
    with tempfile.TemporaryDirectory(prefix="aisys-ranks-") as folder:
        store = os.path.join(folder, "store")
        try:
            for rank in range(world_size):
                parent_end, child_end = context.Pipe()
                stderr = output.add()
                process = context.Process(target=_rank_main, name=f"rank{rank}", daemon=True,
                                          args=(fn, rank, world_size, args[rank], backend, timeout, store, child_end,
                                                stderr))
                process.start()
                child_end.close()
                os.close(stderr)
                pipes.append(parent_end)
                processes.append(process)
            return _collect(pipes, processes, output, wall_timeout)
        finally:
            for process in processes:
                if process.is_alive():
                    process.kill()
                process.join(5)
            for pipe in pipes:
                pipe.close()
            output.close(drain=1.0)


class _Output:
    """The ranks' standard error, each through a pipe of its own: passed on to ours as it comes, the last lines of
    each kept to say why a rank died."""

    KEEP = 4096  # bytes of each rank's output kept

    def __init__(self):
        self.fds: dict[int, int] = {}  # rank -> read end, until its end of file
        self.tails: list[bytes] = []

    def add(self) -> int:
        """A pipe for the next rank: the write end, for the rank's standard error."""
        read, write = os.pipe()
        self.fds[len(self.tails)] = read
        self.tails.append(b"")
        return write

    def read(self, fd: int) -> None:
        rank = next(r for r, f in self.fds.items() if f == fd)
        data = os.read(fd, 1 << 16)
        if not data:
            os.close(self.fds.pop(rank))
            return
        self.tails[rank] = (self.tails[rank] + data)[-self.KEEP:]
        try:
            os.write(2, data)
        except OSError:
            pass

    def drain(self, ranks, seconds: float) -> None:
        """Read these ranks' pipes to their end (the ranks exited), for at most `seconds`."""
        deadline = time.monotonic() + seconds
        while fds := [self.fds[r] for r in ranks if r in self.fds]:
            ready = wait(fds, timeout=max(deadline - time.monotonic(), 0))
            if not ready:
                break
            for fd in ready:
                self.read(fd)

    def last_lines(self, rank: int) -> str:
        """What the rank wrote last (once it has exited)."""
        self.drain([rank], 1.0)
        lines = self.tails[rank].decode(errors="replace").splitlines()[-OUTPUT_LINES:]
        return "\n".join(line.rstrip()[:500] for line in lines)

    def close(self, drain: float) -> None:
        """Pass on what the ranks wrote last (for at most `drain` seconds), then close the pipes."""
        self.drain(list(self.fds), drain)
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _collect(pipes, processes, output: _Output, wall_timeout) -> list[Outcome]:
    """Read each rank's one reply; stop the rest shortly after a failure, or all of them at the wall deadline.
    The ranks' standard error is read all the while: a rank blocks on a full pipe."""
    outcomes: dict[int, Outcome] = {}
    deadline = time.monotonic() + wall_timeout
    waiting = dict(enumerate(pipes))
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready = wait(list(waiting.values()) + list(output.fds.values()), timeout=min(left, 0.2))
        for fd in [r for r in ready if isinstance(r, int)]:
            output.read(fd)
        for pipe in [r for r in ready if not isinstance(r, int)]:
            rank = next(r for r, p in waiting.items() if p is pipe)
            del waiting[rank]
            outcomes[rank] = _read(pipe, rank, processes[rank], output)
            if outcomes[rank].status != "ok":
                deadline = min(deadline, time.monotonic() + GRACE_AFTER_FAILURE)
    failed = any(o.status != "ok" for o in outcomes.values())
    for rank in waiting:
        why = (f"was stopped: still running {GRACE_AFTER_FAILURE:g} s after another rank failed" if failed else
               f"was stopped: still running after {wall_timeout:g} s (a deadlock? every receive needs a matching send)")
        outcomes[rank] = Outcome(rank, "stopped", error=why)
    return [outcomes[rank] for rank in range(len(pipes))]


def _read(pipe, rank, process, output: _Output) -> Outcome:
    try:
        status, payload = pickle.loads(pipe.recv_bytes())
    except (EOFError, OSError):
        process.join(1)
        code = process.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"code {code}"
        last = output.last_lines(rank)
        why = next((f": {meaning}" for text, meaning in ABORTS.items() if text in last), "")
        return Outcome(rank, "died", error=f"died without a result (exit {how}){why}", output=last)
    return Outcome(rank, status, value=payload) if status == "ok" else Outcome(rank, status, error=payload)


def first_failed(outcomes: list[Outcome]) -> int | None:
    """The index of the first rank that failed on its own account, not because a peer went away; None if none
    failed but by being stopped."""
    failed = [o for o in outcomes if o.status in ("raised", "died", "startup")]
    return first_cause([(o.rank, o.error) for o in failed])[0] if failed else None


def _summary(outcomes: list[Outcome], first: int | None = None) -> str:
    """The headline: the rank that failed first, and how many failed."""
    failed = sum(o.status in ("raised", "died", "startup") for o in outcomes)
    first = first_failed(outcomes) if first is None else first
    if first is None:
        return "the ranks did not finish in time (a deadlock?)"
    return outcomes[first].describe(output=False) + (f" ({failed} of {len(outcomes)} ranks failed)" * (failed > 1))


def is_consequence(error: str) -> bool:
    """Whether an error is what a rank sees when a peer failed first (it closed the connection)."""
    return "Connection closed by peer" in error or "Connection reset by peer" in error


def first_cause(errors: list[tuple[int, str]]) -> tuple[int, str]:
    """Of (rank, error) pairs in rank order, the first rank that failed on its own account; else the first."""
    return next(((rank, error) for rank, error in errors if not is_consequence(error)), errors[0])


def rank_device(backend: str):
    """The device of this rank's tensors: GPU `rank` under NCCL (run_ranks gives each rank its own), else the CPU."""
    import torch
    import torch.distributed as dist

    return torch.device("cuda", dist.get_rank()) if backend == "nccl" else torch.device("cpu")


def _die_with_parent() -> None:
    """Linux: the kernel kills this child when the process that forked it dies, so nothing is left behind."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _rank_main(fn, rank, world_size, args, backend, timeout, store, pipe, stderr) -> None:
    os.dup2(stderr, 2)  # to the parent, who passes it on and keeps its end (what gloo says when it ends us)
    os.close(stderr)
    # A dump of this process's Python frames when gloo aborts it (pytest and some kernels turn it on) would bury
    # what gloo said under the launcher's frames.
    faulthandler.disable()
    _die_with_parent()
    import torch

    torch.set_num_threads(1)  # one core per rank, as on a cluster node: p ranks must not oversubscribe the CPU
    try:
        _join(rank, world_size, backend, timeout, store)
    except BaseException as error:
        _reply(pipe, ("startup", error_text(error)))
    try:
        value = fn(*args)
        if backend == "nccl":
            torch.cuda.synchronize()
        reply = ("ok", value)
    except BaseException as error:  # SystemExit too: the parent must hear why this rank stopped
        reply = ("raised", error_text(error))
    _reply(pipe, reply)


def _join(rank, world_size, backend, timeout, store_path) -> None:
    """Join the process group through the file store: gloo over loopback, or NCCL on GPU `rank`."""
    import torch
    import torch.distributed as dist

    device = None
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the ranks are all here: never another interface
        # gloo's ranks compute on the CPU. Hidden GPUs keep their first backward pass from starting autograd's
        # thread per GPU, each making a CUDA context: seconds per rank on a machine with several GPUs, long
        # enough for a peer's receive to time out.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    dist.init_process_group(backend, store=dist.FileStore(store_path, world_size), rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=timeout), device_id=device)
    # Every rank has joined before any starts: a rank whose function returns at once would otherwise
    # exit while a peer is still connecting to it, and fail that peer's start.
    dist.barrier()


def _reply(pipe, reply) -> None:
    """Send this rank's one reply and exit. Plain pickle, by value: multiprocessing's own pickler would
    share tensors through memory that this exit frees."""
    try:
        data = pickle.dumps(reply)
    except Exception as error:
        data = pickle.dumps(("raised", f"TypeError: its result could not be sent back to the parent process ({error})"))
    pipe.send_bytes(data)
    # No destroy_process_group: it can wait on peers that failed. The parent reaps this process.
    pipe.close()
    os._exit(0)


def error_text(error: BaseException) -> str:
    """'Type: message (at file:line in function)', the line being the innermost frame outside torch."""
    where = ""
    here = os.path.dirname(__file__)
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if "/torch/" not in f.filename and os.path.dirname(f.filename) != here]
    if frames:
        frame = frames[-1]
        where = f" (at {os.path.basename(frame.filename)}:{frame.lineno} in {frame.name})"
    message = str(error).split("\n")[0][:500]
    return f"{type(error).__name__}: {message}{where}"
