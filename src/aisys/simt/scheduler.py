"""Run a launch: every block in turn, each thread of a block as a greenlet, with CUDA's synchronisation.

A thread runs until it finishes or reaches a point where it must wait for
others: `cuda.syncthreads()` (the whole block) or a warp collective such as a
shuffle (the lanes of its mask). When every thread waits or is done, the
scheduler releases what can be released. A barrier that not every thread
reaches, or a collective whose lanes never all arrive, is reported as an error
and released anyway, so a wrong kernel ends instead of hanging; so is a
collective called by a lane that its mask leaves out (undefined in CUDA).
"""

import itertools

import numpy as np
from greenlet import greenlet

from . import analysis
from .memory import SHARED_LIMIT, Array, KernelError, as_dtype, as_shape, state

WARP = 32
RUNNING, AT_BARRIER, AT_WARP, DONE = range(4)


class Thread:
    __slots__ = ("x", "y", "z", "number", "warp", "lane", "greenlet", "status", "line", "collective")

    def __init__(self, x, y, z, number):
        self.x, self.y, self.z, self.number = x, y, z, number
        self.warp, self.lane = divmod(number, WARP)
        self.status, self.line, self.collective = RUNNING, 0, None

    @property
    def index(self):
        return (self.x, self.y, self.z)


class Block:
    def __init__(self, launch, index):
        self.launch, self.index = launch, index
        self.x, self.y, self.z = index
        self.shared: dict = {}  # call site -> Array
        self.shared_bytes = 0
        self.epochs: list[int] = []  # log positions where a barrier was released
        self.warp_syncs: list[tuple[int, int]] = []  # (log position, warp) where a warp synchronised
        self.branches: list = []  # (site, thread, taken)

    def shared_array(self, shape, dtype, frame) -> Array:
        key = (frame.f_code, frame.f_lasti)  # one array per call site, as numba allocates them
        array = self.shared.get(key)
        if array is None:
            line = frame.f_lineno
            what = f"cuda.shared.array at line {line}"
            dtype, shape = as_dtype(dtype, what), as_shape(shape, what)
            data = garbage(shape, dtype)  # shared memory starts with whatever the last block left there
            start = -(-self.shared_bytes // 16) * 16
            self.shared_bytes = start + data.nbytes
            if self.shared_bytes > SHARED_LIMIT:
                raise KernelError(f"{what}: the block's shared arrays need {self.shared_bytes} bytes; a block may "
                                  f"declare at most {SHARED_LIMIT} bytes ({SHARED_LIMIT // 1024} KiB) of static "
                                  "shared memory")
            array = self.shared[key] = Array(data, start, f"shared array (line {line})", shared=True)
        return array


def garbage(shape, dtype) -> np.ndarray:
    """An array that, like fresh shared or local memory on a GPU, holds no useful values (bytes 0x7F: large)."""
    return np.full(int(np.prod(shape)) * np.dtype(dtype).itemsize, 0x7F, np.uint8).view(dtype).reshape(shape)


def run_block(launch, block: Block, kernel, args) -> None:
    dims = launch.block
    threads = [Thread(x, y, z, n) for n, (z, y, x) in
               enumerate(itertools.product(range(dims[2]), range(dims[1]), range(dims[0])))]
    state.block, state.log = block, []

    def body(_=None):
        kernel(*args)

    for t in threads:
        t.greenlet = greenlet(body)
    ready = [(t, None) for t in threads]
    while True:
        for t, value in ready:
            state.thread = t
            try:
                t.greenlet.switch(value)
            except KernelError:
                raise
            except Exception as error:
                raise KernelError(f"kernel `{launch.name}` raised {type(error).__name__}: {error} "
                                  f"(thread {t.index} of block {block.index})") from error
            if t.greenlet.dead:
                t.status = DONE
        ready = _release_warps(launch, block, threads)
        if not ready:
            ready = _release_barrier(launch, block, threads)
        if not ready:
            break
    analysis.add_block(launch, block, state.log, len(threads))


def _release_warps(launch, block, threads) -> list:
    """Complete every warp collective whose lanes have all arrived; the lanes to resume, with their results."""
    groups: dict[tuple, list] = {}
    for t in threads:
        if t.status == AT_WARP:
            groups.setdefault((t.warp, t.collective[1]), []).append(t)
    ready = []
    for (warp, mask), waiting in groups.items():
        arrived = {t.lane for t in waiting}
        if all(lane in arrived for lane in range(WARP) if mask >> lane & 1):
            ready += _resume_collective(launch, block, warp, waiting)
    return ready


def _resume_collective(launch, block, warp, waiting) -> list:
    first = waiting[0]
    op, mask = first.collective[:2]
    outside = [t.lane for t in waiting if not mask >> t.lane & 1]
    if outside:
        launch.error("warp", first.line,
                     f"cuda.{op} at line {first.line} was called by lane(s) {_lanes(outside)} of warp {warp}, "
                     f"which its mask {mask:#010x} leaves out: on a GPU the result is undefined. A lane that calls "
                     "a warp collective must be in its mask (for the whole warp, 0xFFFFFFFF)")
    block.warp_syncs.append((len(state.log), warp))
    results = _collective(waiting)
    for t in waiting:
        t.status = RUNNING
    return list(results.items())


def _lanes(lanes) -> str:
    lanes = sorted(lanes)
    return f"{lanes[0]}..{lanes[-1]}" if len(lanes) > 3 else ", ".join(map(str, lanes))


def _collective(waiting: list) -> dict:
    """The result each waiting lane gets from its warp collective."""
    op = waiting[0].collective[0]
    values = {t.lane: t.collective[2] for t in waiting}
    results = {}
    for t in waiting:
        _, mask, value, arg = t.collective
        if op == "syncwarp":
            results[t] = None
        elif op in ("shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync"):
            source = {"shfl_sync": lambda: int(arg) % WARP, "shfl_up_sync": lambda: t.lane - int(arg),
                      "shfl_down_sync": lambda: t.lane + int(arg), "shfl_xor_sync": lambda: t.lane ^ int(arg)}[op]()
            results[t] = values.get(source, value) if 0 <= source < WARP else value
        elif op == "ballot_sync":
            results[t] = sum(1 << lane for lane, v in values.items() if v)
        elif op == "all_sync":
            results[t] = int(all(values.values()))
        elif op == "any_sync":
            results[t] = int(any(values.values()))
        elif op == "eq_sync":
            results[t] = int(len({bool(v) for v in values.values()}) == 1)
        else:
            raise AssertionError(op)
    return results


def _release_barrier(launch, block, threads) -> list:
    """Release the block's barrier, or, when nothing can move, whatever waits, reporting why it is wrong."""
    stuck = [t for t in threads if t.status == AT_WARP]
    if stuck:  # no collective can complete: some lanes of each are at a barrier, elsewhere, or have returned
        ready = []
        for warp in sorted({t.warp for t in stuck}):
            waiting = [t for t in stuck if t.warp == warp]
            first = waiting[0]
            mask = first.collective[1]
            missing = [lane for lane in range(WARP) if mask >> lane & 1 and lane not in {t.lane for t in waiting}]
            launch.error("warp", first.line,
                         f"cuda.{first.collective[0]} at line {first.line} waits for lane(s) {_lanes(missing)} of "
                         f"warp {warp} (mask {mask:#010x}), which never arrive: every lane named in the mask must "
                         "reach the same collective (they returned early, or wait at a barrier or elsewhere)")
            ready += _resume_collective(launch, block, warp, waiting)
        return ready
    waiting = [t for t in threads if t.status == AT_BARRIER]
    if not waiting:
        return []
    lines = sorted({t.line for t in waiting})
    if len(waiting) < len(threads):
        done = len(threads) - len(waiting)
        launch.error("barrier", lines[0],
                     f"cuda.syncthreads() at line {lines[0]} was reached by {len(waiting)} of the block's "
                     f"{len(threads)} threads; {done} had already returned. On a GPU the block hangs or "
                     "computes garbage: every thread must reach every barrier, so keep bounds checks around "
                     "the work, not around the barrier (or return only after the last barrier)")
    elif len(lines) > 1:
        launch.error("barrier", lines[0], f"threads of one block wait at different barriers (lines "
                                          f"{', '.join(map(str, lines))}): a barrier inside a branch that "
                                          "only some threads take")
    block.epochs.append(len(state.log))
    count = sum(bool(t.collective) for t in waiting)  # for syncthreads_count/and/or: the predicates that held
    for t in waiting:
        t.status, t.collective = RUNNING, None
    return [(t, count) for t in waiting]


# What threads call (through the dialect); `frame` is the kernel's frame, for line numbers ------------

def syncthreads(frame, predicate=False):
    t = state.thread
    t.status, t.line, t.collective = AT_BARRIER, frame.f_lineno, bool(predicate)
    return t.greenlet.parent.switch()  # the number of threads whose predicate held


def warp_collective(frame, op: str, mask, value=None, arg=None):
    t = state.thread
    t.status, t.line, t.collective = AT_WARP, frame.f_lineno, (op, int(mask) & 0xFFFFFFFF, value, arg)
    return t.greenlet.parent.switch()


def shared_array(frame, shape, dtype):
    return state.block.shared_array(shape, dtype, frame)
