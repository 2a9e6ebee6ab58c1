"""One kernel launch in the simulator: check the configuration and arguments, run every block, build the report."""

import time
import warnings

import numpy as np

from . import analysis, scheduler
from .instrument import SITES
from .memory import Array, DeviceArray, KernelError, state
from .report import LaunchReport

MAX_THREADS = 1 << 21  # a larger launch would take minutes here; a grid-stride loop needs far fewer threads
GRID_LIMITS = (2**31 - 1, 65535, 65535)
BLOCK_LIMITS = (1024, 1024, 64)
MAX_BLOCK_THREADS = 1024


class SimtWarning(UserWarning):
    """A simulated launch did something a sanitizer reports (a race, a barrier not every thread reaches)."""


def dims(name: str, value, limits) -> tuple[int, int, int]:
    """A launch dimension as (x, y, z), from an int or a tuple of one to three ints."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    if not 1 <= len(items) <= 3 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                           for v in items):
        raise KernelError(f"{name} must be an integer or a tuple of 1 to 3 integers, got {value!r}")
    x, y, z = (*map(int, items), 1, 1)[:3]
    for axis, size, limit in zip("xyz", (x, y, z), limits):
        if not 1 <= size <= limit:
            raise KernelError(f"{name} must be between 1 and {limit} along {axis}, got {size} (in {value!r})")
    return x, y, z


def configuration(grid, block) -> tuple[tuple, tuple]:
    grid, block = dims("grid (blocks per grid)", grid, GRID_LIMITS), dims("block (threads per block)", block,
                                                                          BLOCK_LIMITS)
    if block[0] * block[1] * block[2] > MAX_BLOCK_THREADS:
        raise KernelError(f"a block holds at most {MAX_BLOCK_THREADS} threads; block {block} has "
                          f"{block[0] * block[1] * block[2]}")
    return grid, block


class Launch:
    """The state and running totals of one launch."""

    def __init__(self, name: str, grid, block):
        self.name, self.grid, self.block = name, grid, block
        self.threads_per_block = block[0] * block[1] * block[2]
        self.global_memory, self.shared_memory = analysis.Counters(), analysis.Counters()
        self.global_atomics, self.shared_atomics = analysis.Counters(), analysis.Counters()
        self.branches = analysis.Counters()
        self.errors: dict[tuple, dict] = {}
        self.shared_bytes = 0

    def error(self, kind: str, line: int, message: str, count: int = 1) -> None:
        entry = self.errors.setdefault((kind, line), {"kind": kind, "line": line, "message": message, "count": 0})
        entry["count"] += count

    def race(self, block, count: int, examples: list) -> None:
        write_site, other_site, writer, other, address = examples[0]
        w, o = SITES[write_site], SITES[other_site]
        threads = _thread_index(writer, self.block), _thread_index(other, self.block)
        verbs = {"store": "writes", "load": "reads", "atomic": "atomically updates"}
        self.error("race", w.line,
                   f"race on shared memory: thread {threads[0]} of block {block.index} {verbs[w.kind]} "
                   f"{_element(block, address)} at line {w.line} (`{w.source}`) and thread {threads[1]} "
                   f"{verbs[o.kind]} it "
                   f"at line {o.line} (`{o.source}`) with no cuda.syncthreads() between them, so the result depends "
                   "on which thread runs first. Put a barrier between the write and the other thread's access.",
                   count)

    def report(self, seconds: float) -> LaunchReport:
        lines = []
        totals = {}
        for total, space, counters, keys in (
                ("global", "global", self.global_memory, ("requests", "sectors", "ideal_sectors")),
                ("shared", "shared", self.shared_memory, ("requests", "wavefronts", "bank_conflicts")),
                ("atomics", "global", self.global_atomics, ("requests", "operations")),
                ("atomics", "shared", self.shared_atomics, ("requests", "operations")),
                ("branch", "branch", self.branches, ("requests", "divergent"))):
            totals.setdefault(total, {k: 0 for k in keys})
            for site, counts in counters.sites.items():
                s = SITES[site]
                row = {"line": s.line, "source": s.source, "space": space,
                       "kind": "atomic" if total == "atomics" else s.kind,
                       "requests": 0, "operations": 0, "sectors": 0, "ideal_sectors": 0, "wavefronts": 0,
                       "bank_conflicts": 0, "divergent": 0}
                for k in keys:
                    totals[total][k] += counts[k]
                    if k in row:
                        row[k] = counts[k]
                lines.append(row)
        lines.sort(key=lambda r: (r["line"], r["space"], r["kind"]))
        g, sh = totals["global"], totals["shared"]
        g["efficiency"] = g["ideal_sectors"] / g["sectors"] if g["sectors"] else 1.0
        sh["bytes_per_block"] = self.shared_bytes
        errors = sorted(self.errors.values(), key=lambda e: (e["line"], e["kind"]))
        return LaunchReport({
            "kernel": self.name, "grid": list(self.grid), "block": list(self.block),
            "threads": int(np.prod(self.grid) * np.prod(self.block)), "seconds": seconds,
            "global": g, "shared": sh,
            "branches": {"evaluations": totals["branch"]["requests"], "divergent": totals["branch"]["divergent"]},
            "atomics": totals["atomics"], "lines": lines, "errors": errors})


def _thread_index(number: int, block) -> tuple:
    x = number % block[0]
    y = number // block[0] % block[1]
    return (x, y, number // (block[0] * block[1]))


def _element(block, address: int) -> str:
    for array in block.shared.values():
        offset = address - array.base
        if 0 <= offset < array.array.nbytes:
            index = np.unravel_index(offset // array.itemsize, array.shape)
            return f"{array.name}[{', '.join(str(int(i)) for i in index)}]"
    return f"shared address {address}"


def kernel_arguments(name: str, parameters: list[str], args) -> list:
    """The kernel's arguments as the simulator passes them: arrays become simulated global arrays."""
    out, bases, next_base = [], {}, 1 << 20
    for i, value in enumerate(args):
        what = f"argument {i} (`{parameters[i] if i < len(parameters) else '?'}`) of kernel `{name}`"
        if isinstance(value, DeviceArray):
            value = value._array
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biufc":
                raise KernelError(f"{what} is an array of {value.dtype}; kernels take arrays of numbers")
            key = value.__array_interface__["data"][0]
            if key not in bases:
                bases[key] = next_base
                next_base += -(-max(value.nbytes, 1) // 256) * 256
            out.append(Array(value, bases[key], parameters[i] if i < len(parameters) else f"arg{i}", shared=False))
        elif isinstance(value, (bool, int, float, complex, np.generic)):
            out.append(value)
        elif isinstance(value, tuple) and all(isinstance(v, (bool, int, float, np.generic)) for v in value):
            out.append(value)
        else:
            raise KernelError(f"{what} is a {type(value).__module__}.{type(value).__name__}; kernels take numpy "
                              "arrays, device arrays (cuda.to_device, cuda.device_array), numbers, or tuples of "
                              "numbers")
    return out


def run(name: str, function, parameters: list[str], grid, block, args) -> LaunchReport:
    """Run a launch of the (instrumented) kernel `function` in the simulator."""
    threads = int(np.prod(grid) * np.prod(block))
    if threads > MAX_THREADS:
        raise KernelError(f"kernel `{name}`: this launch has {threads:,} threads; the simulator runs some 10^5 "
                          "threads a second. Launch fewer blocks (a grid-stride loop lets a small grid cover a "
                          f"large array) or raise aisys.simt.launch.MAX_THREADS (now {MAX_THREADS:,})")
    if state.launch is not None:
        raise KernelError(f"kernel `{name}` was launched from inside a kernel (dynamic parallelism), which the "
                          "simulator does not support")
    arguments = kernel_arguments(name, parameters, args)
    launch = Launch(name, grid, block)
    start = time.perf_counter()
    state.launch = launch
    try:
        for bz in range(grid[2]):
            for by in range(grid[1]):
                for bx in range(grid[0]):
                    block_state = scheduler.Block(launch, (bx, by, bz))
                    scheduler.run_block(launch, block_state, function, arguments)
                    launch.shared_bytes = max(launch.shared_bytes, block_state.shared_bytes)
    finally:
        state.launch = state.block = state.thread = None
        state.log = []
    report = launch.report(time.perf_counter() - start)
    for error in report["errors"]:
        warnings.warn(f"kernel `{name}`: {error['message']}", SimtWarning, stacklevel=4)
    return report
