"""Timing kernels on a GPU against the hardware's limits and the vendor's own op: the harness of every kernel chapter.

    softmax = Benchmark("softmax", aisys.triton_kernels.softmax.softmax, lambda x: torch.softmax(x, dim=-1),
                        make_inputs=lambda shape: torch.randn(shape, device=aisys.device.current()))
    rows = measure([softmax], sizes=[(4096, 4096), (4096, 16384)])
    print(table(rows))
    plot(rows, "/tmp/softmax.png")

How one kernel is measured at one size, on a GPU:

- its output is compared once with the baseline's (torch's own op) on the same inputs;
- warm-up calls come first, so compilation, autotuning and the allocator's growth stay out;
- each repetition is timed with CUDA events around the kernel alone, after an L2 flush: a
  buffer twice the L2 size is written (evicting whatever the last repetition left) and another
  is read (so the kernel does not pay to write the flush's dirty lines back to HBM);
- a spin kernel of about 0.2 ms follows the flush (nvbench's "blocking kernel"), so the GPU is
  still busy while Python launches the kernel: the time is the GPU's, not the host's launch
  overhead, which a kernel of a few microseconds would otherwise never show past;
- repetitions rotate among several input sets made by `make_inputs`, and the kernel and the
  baseline alternate, so both see the same inputs, flushes and clock state;
- the row reports the median time and the interquartile spread, bytes / time and FLOPs / time
  as fractions of the datasheet peaks (aisys.hardware) and of the copy bandwidth measured on
  this device in the same run, and the baseline's time.

Bytes are the minimum traffic (each input read once, each output written once) unless the
benchmark says otherwise, as in aisys.roofline. On a CPU there is no GPU to measure: each kernel
runs once (in the Triton interpreter) for correctness against the baseline, and everything
printed says so.
"""

import math
import re
import statistics
import time
import warnings
from dataclasses import KW_ONLY, dataclass
from numbers import Real
from pathlib import Path
from typing import Any, Callable

from . import device as _device
from ._validate import nonnegative_int, nonnegative_number, one_of, positive_int
from .dtypes import canonical
from .hardware import chip_for_device

NO_GPU = "no GPU: timings are CPU wall-clock of the Triton interpreter, not a measurement of any GPU"

# (rtol, atol) for comparing a kernel's output with the baseline's, by the output's dtype. Looser than
# bit-exact: a kernel and the vendor's op add in different orders.
TOLERANCES = {"float64": (1e-7, 1e-7), "float32": (1e-4, 1e-5), "float16": (2e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)}

COPY_BYTES = 2**30  # the copy that measures this device's bandwidth: far larger than any L2
# Clock cycles of the spin kernel that hides the host's launch overhead: 1 ms at 2 GHz. A Triton launch through an
# autotuner and a Python wrapper takes about 0.1 ms on an H100 host. At 0.2 ms, the value this once had, the paged
# decode kernel's 18-microsecond launches timed 40 to 90 microseconds in bursts of repetitions while SDPA's (launched
# from C++) did not move: what a host that has not finished launching when the spin ends looks like. At 1 ms no such
# burst was seen in three runs.
BLOCKING_CYCLES = 2_000_000


class NotAGPUWarning(UserWarning):
    """Raised as a warning when `measure` runs on a CPU: the times say nothing about a GPU."""


@dataclass(frozen=True)
class Benchmark:
    """A kernel, the baseline it is measured against, and how to make its inputs for a size.

    run, baseline: called as f(*make_inputs(size)); each returns a tensor or a tuple of tensors.
    bytes, flops: size -> bytes moved / FLOPs done by one call. bytes=None counts each input and
        output tensor once (the minimum traffic); flops=None reports no FLOP/s.
    compute: the dtype whose peak FLOP/s the FLOPs are compared with ("fp32" for CUDA-core math,
        "bf16" for a Tensor Core GEMM).
    rtol, atol: tolerances of the comparison with the baseline (default: by the output's dtype).
    atol_of_largest: atol is a fraction of each baseline tensor's largest magnitude (normwise): for sums over many
        terms (a weight's gradient over every token), whose rounding error scales with the sum's largest entries,
        not with each small entry.
    """

    name: str
    run: Callable
    baseline: Callable | None
    _: KW_ONLY
    make_inputs: Callable[[Any], Any]
    bytes: Callable[[Any], float] | None = None
    flops: Callable[[Any], float] | None = None
    compute: str = "fp32"
    rtol: float | None = None
    atol: float | None = None
    atol_of_largest: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        _callable("run", self.run, "the kernel's host function")
        if self.baseline is not None:
            _callable("baseline", self.baseline, "the vendor's op, e.g. torch.sum, or None")
        _callable("make_inputs", self.make_inputs, "size -> the arguments of run and baseline")
        for arg in ("bytes", "flops"):
            if getattr(self, arg) is not None:
                _callable(arg, getattr(self, arg), "size -> a number, or None")
        try:
            object.__setattr__(self, "compute", canonical(self.compute))
        except ValueError:
            raise ValueError(f"compute must be a dtype name such as 'fp32' or 'bf16', got {self.compute!r}") from None
        for arg in ("rtol", "atol"):
            if getattr(self, arg) is not None:
                nonnegative_number(arg, getattr(self, arg))


@dataclass(frozen=True)
class Row:
    """One kernel at one size. Times in seconds, rates per second; None where there is nothing to report."""

    name: str
    size: str
    device: str  # "cuda" or "cpu"
    device_name: str  # as torch names it, or "cpu"
    seconds: float  # GPU: median of `reps` timed runs; CPU: wall-clock of one run
    correct: bool
    max_error: float  # largest |kernel - baseline| (0 without a baseline)
    spread: float | None = None  # interquartile range / median
    reps: int = 1
    input_sets: int = 1
    bytes: float | None = None
    flops: float | None = None
    baseline_seconds: float | None = None
    chip: str | None = None  # the aisys.hardware entry the device matched
    peak_bandwidth: float | None = None  # datasheet, bytes/s
    peak_flops: float | None = None  # datasheet, FLOP/s for the benchmark's compute dtype
    compute: str = "fp32"
    copy_bandwidth: float | None = None  # measured in the same run, bytes/s

    @property
    def bandwidth(self) -> float | None:
        return _ratio(self.bytes, self.seconds)

    @property
    def flop_rate(self) -> float | None:
        return _ratio(self.flops, self.seconds)

    @property
    def baseline_bandwidth(self) -> float | None:
        return None if self.baseline_seconds is None else _ratio(self.bytes, self.baseline_seconds)

    @property
    def fraction_of_peak_bandwidth(self) -> float | None:
        return _ratio(self.bandwidth, self.peak_bandwidth)

    @property
    def fraction_of_copy(self) -> float | None:
        return _ratio(self.bandwidth, self.copy_bandwidth)

    @property
    def fraction_of_peak_flops(self) -> float | None:
        return _ratio(self.flop_rate, self.peak_flops)

    @property
    def speedup(self) -> float | None:
        """Baseline time / kernel time: above 1 the kernel is faster than the baseline."""
        return _ratio(self.baseline_seconds, self.seconds)


def measure(benchmarks, sizes, *, warmup: int = 5, reps: int = 30, input_sets: int = 2,
            device: str | None = None, copy_bandwidth: float | None = None) -> list[Row]:
    """One Row per benchmark and size: timed on a GPU; on a CPU run once for correctness (with a NotAGPUWarning).

    sizes are passed to each benchmark's make_inputs (an int, a shape, anything it accepts).
    copy_bandwidth: bytes/s measured earlier in this process; measured here when None (on a GPU).
    """
    benchmarks = _benchmarks(benchmarks)
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise ValueError(f"sizes must be a list of sizes for make_inputs, got {sizes!r}")
    sizes = list(sizes)
    if not sizes:
        raise ValueError("sizes must name at least one size")
    warmup = nonnegative_int("warmup", warmup)
    reps = positive_int("reps", reps)
    input_sets = positive_int("input_sets", input_sets)
    device = _device.current() if device is None else one_of("device", device, ("cpu", "cuda"))
    if copy_bandwidth is not None:
        copy_bandwidth = nonnegative_number("copy_bandwidth", copy_bandwidth)
    if device == "cpu":
        warnings.warn(NO_GPU, NotAGPUWarning, stacklevel=2)
        return [_check_on_cpu(bench, size) for bench in benchmarks for size in sizes]

    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("device='cuda', but torch sees no CUDA GPU here; use device='cpu' for correctness only")
    flush = _L2Flush()
    if copy_bandwidth is None:
        copy_bandwidth = measure_copy_bandwidth(reps=reps, flush=flush)
    return [_measure_on_gpu(bench, size, warmup, reps, input_sets, flush, copy_bandwidth)
            for bench in benchmarks for size in sizes]


def measure_copy_bandwidth(nbytes: int = COPY_BYTES, reps: int = 30, flush=None) -> float:
    """Bytes/s of a torch device-to-device copy on this GPU, counting bytes read and written: the practical roof."""
    import torch

    nbytes = positive_int("nbytes", nbytes)
    reps = positive_int("reps", reps)
    if not torch.cuda.is_available():
        raise RuntimeError("measure_copy_bandwidth needs a CUDA GPU; torch sees none here")
    src = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    (times,) = _time_on_gpu([dst.copy_], [(src,)], warmup=3, reps=reps, flush=flush or _L2Flush())
    return 2 * src.nbytes / statistics.median(times)


def table(rows) -> str:
    """The rows as a plain-text table, with a header saying what was measured where."""
    rows = _rows(rows)
    if any(row.device != "cuda" for row in rows):
        return "\n".join([NO_GPU + "; each kernel ran once, for correctness against its baseline.", "",
                          _grid(["kernel", "size", "wall ms (CPU)", "baseline wall ms (CPU)", "max |error|", "ok"],
                                [[r.name, r.size, _num(_ms(r.seconds), 3), _num(_ms(r.baseline_seconds), 3),
                                  f"{r.max_error:.2g}", _ok(r)] for r in rows])])
    with_bytes = any(r.bytes is not None for r in rows)
    with_flops = any(r.flops is not None for r in rows)
    headers = ["kernel", "size", "median ms", "IQR %"]
    if with_bytes:
        headers += ["GB/s", "% peak BW", "% copy BW"]
    if with_flops:
        headers += ["TFLOP/s", "% peak FLOP/s"]
    headers += ["baseline ms", "vs baseline", "ok"]
    body = []
    for r in rows:
        line = [r.name, r.size, _num(_ms(r.seconds), 4), _num(_pct(r.spread), 1)]
        if with_bytes:
            line += [_num(_scale(r.bandwidth, 1e9), 0), _num(_pct(r.fraction_of_peak_bandwidth), 1),
                     _num(_pct(r.fraction_of_copy), 1)]
        if with_flops:
            line += [_num(_scale(r.flop_rate, 1e12), 2), _num(_pct(r.fraction_of_peak_flops), 1)]
        speedup = "-" if r.speedup is None else f"{r.speedup:.2f}x"
        line += [_num(_ms(r.baseline_seconds), 4), speedup, _ok(r)]
        body.append(line)
    return "\n".join(_header(rows) + ["", _grid(headers, body)])


def tuned_against_readable(rows, baseline: str) -> list[str]:
    """One line per row named '<kernel> tuned' that has a '<kernel> readable' twin at the same size: both speeds
    against `baseline` (the baseline's name in the lines) in this run, and the tuned kernel's over the readable's."""
    rows = _rows(rows)
    by = {(r.name, r.size): r for r in rows}
    pairs = [(by.get((r.name.removesuffix(" tuned") + " readable", r.size)), r)
             for r in rows if r.name.endswith(" tuned")]
    pairs = [(old, new) for old, new in pairs if old is not None and old.speedup and new.speedup]
    if not pairs:
        return []
    name_width = max(len(old.name) for old, _ in pairs)
    size_width = max(len(new.size) for _, new in pairs)
    return [f"{old.name:{name_width}} {new.size:>{size_width}}  readable {old.speedup:.2f}x {baseline}, "
            f"tuned {new.speedup:.2f}x {baseline} ({old.seconds / new.seconds:.2f}x the readable kernel's speed)"
            for old, new in pairs]


def plot(rows, path) -> Path:
    """Save a figure of GB/s (or TFLOP/s) against size, one panel per kernel, with the roofs; returns the path."""
    from matplotlib.figure import Figure  # no pyplot: no global backend, works headless

    rows = _rows(rows)
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(f"path must be in an existing folder, got {str(path)!r}")
    names = list(dict.fromkeys(r.name for r in rows))
    fig = Figure(figsize=(7, 3.2 * len(names)), layout="constrained")
    for ax, name in zip(fig.subplots(len(names), 1, squeeze=False)[:, 0], names):
        series = [r for r in rows if r.name == name]
        x = range(len(series))
        by_bytes = all(r.bytes is not None for r in series)
        scale, unit = (1e9, "GB/s") if by_bytes else (1e12, "TFLOP/s")
        work = [(r.bytes if by_bytes else r.flops) or 0.0 for r in series]
        ax.plot(x, [w / r.seconds / scale for w, r in zip(work, series)], "o-", label=name)
        if all(r.baseline_seconds for r in series):
            ax.plot(x, [w / r.baseline_seconds / scale for w, r in zip(work, series)], "s--", label="baseline")
        roofs = ([("copy bandwidth (measured)", series[0].copy_bandwidth),
                  ("HBM peak (datasheet)", series[0].peak_bandwidth)] if by_bytes
                 else [(f"{series[0].compute} peak (datasheet)", series[0].peak_flops)])
        for (label, value), style in zip(roofs, (":", "-.")):
            if value:
                ax.axhline(value / scale, linestyle=style, color="gray", label=label)
        ax.set_xticks(list(x), [r.size for r in series], rotation=20)
        ax.set_xlabel("size")
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.set_title(name)
        ax.legend(fontsize="small")
    device = rows[0].device_name if rows[0].device == "cuda" else NO_GPU
    fig.suptitle(device, fontsize="medium")
    fig.savefig(path)
    return path


# --- measuring -------------------------------------------------------------------------------------


class _L2Flush:
    """Empties L2 between repetitions: write a buffer twice its size, then read another as large."""

    def __init__(self):
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = getattr(props, "L2_cache_size", 0) or 64 * 2**20  # bytes
        self.write = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
        self.read = torch.ones_like(self.write)

    def __call__(self):
        self.write.fill_(1.0)  # evicts everything the previous repetition left in L2
        self.read.sum()  # evicts the dirty lines just written, so their write-back is not timed


def _time_on_gpu(fns, input_sets, warmup, reps, flush) -> list[list[float]]:
    """Seconds of each repetition of each fn, timed with CUDA events; the fns alternate on the same inputs."""
    import torch

    for _ in range(warmup):
        for fn in fns:
            for args in input_sets:
                fn(*args)
    torch.cuda.synchronize()
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
              for _ in fns]
    for r in range(reps):
        args = input_sets[r % len(input_sets)]
        for fn, pairs in zip(fns, events):
            flush()
            torch.cuda._sleep(BLOCKING_CYCLES)  # the GPU waits on this while the host launches fn: no idle gap is timed
            start, end = pairs[r]
            start.record()
            fn(*args)
            end.record()
    torch.cuda.synchronize()
    return [[start.elapsed_time(end) / 1e3 for start, end in pairs] for pairs in events]


def _measure_on_gpu(bench, size, warmup, reps, input_sets, flush, copy_bandwidth) -> Row:
    import torch

    sets = [_inputs(bench, size) for _ in range(input_sets)]
    out = bench.run(*sets[0])
    correct, error = _compare(bench, out, None if bench.baseline is None else bench.baseline(*sets[0]))
    fns = [bench.run] + ([bench.baseline] if bench.baseline is not None else [])
    times = _time_on_gpu(fns, sets, warmup, reps, flush)
    name = torch.cuda.get_device_name(torch.cuda.current_device())
    chip = chip_for_device(name)
    return Row(name=bench.name, size=size_label(size), device="cuda", device_name=name,
               seconds=statistics.median(times[0]), correct=correct, max_error=error,
               spread=_iqr(times[0]) / statistics.median(times[0]), reps=reps, input_sets=input_sets,
               bytes=_bytes(bench, size, sets[0], out), flops=_flops(bench, size),
               baseline_seconds=statistics.median(times[1]) if len(times) > 1 else None,
               chip=chip.name if chip else None, peak_bandwidth=chip.memory_bandwidth if chip else None,
               peak_flops=chip.peak_flops.get(bench.compute) if chip else None, compute=bench.compute,
               copy_bandwidth=copy_bandwidth)


def _check_on_cpu(bench, size) -> Row:
    args = _inputs(bench, size)
    start = time.perf_counter()
    out = bench.run(*args)
    seconds = time.perf_counter() - start
    baseline_seconds, ref = None, None
    if bench.baseline is not None:
        start = time.perf_counter()
        ref = bench.baseline(*args)
        baseline_seconds = time.perf_counter() - start
    correct, error = _compare(bench, out, ref)
    return Row(name=bench.name, size=size_label(size), device="cpu", device_name="cpu", seconds=seconds,
               correct=correct, max_error=error, bytes=_bytes(bench, size, args, out), flops=_flops(bench, size),
               baseline_seconds=baseline_seconds, compute=bench.compute)


def _inputs(bench, size) -> tuple:
    args = bench.make_inputs(size)
    if args is None:
        raise ValueError(f"make_inputs({size!r}) of {bench.name!r} returned None; it must return run's arguments")
    return tuple(args) if isinstance(args, (tuple, list)) else (args,)


def _tensors(value, what) -> list:
    import torch

    values = list(value) if isinstance(value, (tuple, list)) else [value]
    for v in values:
        if not isinstance(v, torch.Tensor):
            raise TypeError(f"{what} must return a tensor or a tuple of tensors, got {type(v).__name__}")
    return values


def _compare(bench, out, ref) -> tuple[bool, float]:
    """(all close, largest absolute difference) of the kernel's output(s) against the baseline's."""
    import torch

    outs = _tensors(out, f"run of {bench.name!r}")
    if ref is None:
        return True, 0.0
    refs = _tensors(ref, f"baseline of {bench.name!r}")
    if len(outs) != len(refs) or any(o.shape != r.shape for o, r in zip(outs, refs)):
        return False, math.inf
    ok, worst = True, 0.0
    for o, r in zip(outs, refs):
        default_rtol, default_atol = TOLERANCES.get(str(o.dtype).removeprefix("torch."), (0.0, 0.0))
        rtol = default_rtol if bench.rtol is None else bench.rtol
        atol = default_atol if bench.atol is None else bench.atol
        o, r = o.detach().to(r.device).float(), r.detach().float()
        if bench.atol_of_largest and r.numel():
            atol *= float(r.abs().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).max())
        ok = ok and bool(torch.isclose(o, r, rtol=rtol, atol=atol, equal_nan=True).all())
        if o.numel():
            same = (o == r) | (o.isnan() & r.isnan())  # equal infinities and both-NaN count as no error
            diff = torch.where(same, torch.zeros_like(o), (o - r).abs()).nan_to_num(nan=math.inf)
            worst = max(worst, float(diff.max()))
    return ok, worst


def _bytes(bench, size, args, out) -> float:
    if bench.bytes is not None:
        return _number(f"bytes({size!r}) of {bench.name!r}", bench.bytes(size))
    import torch

    tensors = [a for a in args if isinstance(a, torch.Tensor)] + _tensors(out, f"run of {bench.name!r}")
    return float(sum(t.numel() * t.element_size() for t in tensors))


def _flops(bench, size) -> float | None:
    return None if bench.flops is None else _number(f"flops({size!r}) of {bench.name!r}", bench.flops(size))


def _number(what, value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must return a finite number >= 0, got {value!r}")
    return float(value)


def _iqr(times) -> float:
    if len(times) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(times, n=4)
    return q3 - q1


# --- validating and formatting ---------------------------------------------------------------------


def _callable(name, value, what):
    if not callable(value):
        raise TypeError(f"{name} must be callable ({what}), got {value!r}")


def _benchmarks(benchmarks) -> list[Benchmark]:
    items = [benchmarks] if isinstance(benchmarks, Benchmark) else benchmarks
    if not isinstance(items, (list, tuple)) or not items or not all(isinstance(b, Benchmark) for b in items):
        raise ValueError(f"benchmarks must be a Benchmark or a non-empty list of them, got {benchmarks!r}")
    return list(items)


def _rows(rows) -> list[Row]:
    if not isinstance(rows, (list, tuple)) or not rows or not all(isinstance(r, Row) for r in rows):
        raise ValueError(f"rows must be a non-empty list of Row (what measure returns), got {rows!r}")
    return list(rows)


def gpu_label(name: str) -> str:
    """The short name a stored measurement's file carries: 'h100' from 'NVIDIA H100 80GB HBM3', 'h200' from
    'NVIDIA H200' (torch.cuda.get_device_name)."""
    found = re.search(r"\b([A-Z]\d{2,4})\b", name)
    return (found.group(1) if found else re.sub(r"\W+", "", name)).lower()


def size_label(size) -> str:
    """A size as a table shows it: 2**28 as '2^28', a shape (4096, 8192) as '4096x8192'."""
    if isinstance(size, bool):
        return str(size)
    if isinstance(size, int):
        return f"2^{size.bit_length() - 1}" if size >= 1024 and size & (size - 1) == 0 else str(size)
    if isinstance(size, (tuple, list)):
        return "x".join(size_label(s) if not isinstance(s, int) else str(s) for s in size)
    return str(size)


def _header(rows) -> list[str]:
    lines = []
    for name in dict.fromkeys(r.device_name for r in rows):
        r = next(r for r in rows if r.device_name == name)
        if r.chip:
            lines.append(f"GPU: {name}, in aisys.hardware as {r.chip} (HBM peak {r.peak_bandwidth / 1e9:,.0f} GB/s).")
        else:
            lines.append(f"GPU: {name}, not in aisys.hardware: no datasheet peaks, fractions of peak left blank.")
        if r.copy_bandwidth:
            lines.append(f"Copy bandwidth measured in this run (torch device-to-device copy, bytes read + written): "
                         f"{r.copy_bandwidth / 1e9:,.0f} GB/s.")
    r = rows[0]
    lines.append(f"Times: median of {r.reps} repetitions (CUDA events; L2 flushed before each; GPU kept busy while "
                 f"the host launches; {r.input_sets} input set(s) in rotation); IQR % = interquartile range / median.")
    lines.append("vs baseline = baseline time / kernel time (above 1: the kernel is faster).")
    wrong = [f"{r.name} {r.size}" for r in rows if not r.correct]
    if wrong:
        lines.append("WRONG OUTPUT (differs from the baseline): " + ", ".join(wrong))
    return lines


def _grid(headers, body) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *body)]
    left = 2  # kernel and size read left-aligned; numbers right-aligned
    lines = [headers, ["-" * w for w in widths], *body]
    return "\n".join("  ".join(str(c).ljust(w) if i < left else str(c).rjust(w)
                               for i, (c, w) in enumerate(zip(line, widths))).rstrip() for line in lines)


def _ms(seconds):
    return None if seconds is None else seconds * 1e3


def _pct(fraction):
    return None if fraction is None else fraction * 100


def _scale(value, unit):
    return None if value is None else value / unit


def _num(value, digits) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ok(row) -> str:
    return "yes" if row.correct else "NO"


def _ratio(a, b):
    return None if a is None or not b else a / b
