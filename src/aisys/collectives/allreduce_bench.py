"""The reference ring all-reduce against torch.distributed's all_reduce, timed on the same buffers in the same run.

    rows = compare([2**10, 2**20], world_size=2)             # gloo on CPU
    rows = compare(sweep("nccl"), world_size=2, backend="nccl")
    print(table(rows))

Each rank times both on one float32 buffer per size: warm-up runs, then for each repetition a
dist.barrier, the operation, and the clock stopped once it is done (CUDA events on GPUs, started
once the host has queued the operation, as nccl-tests' back-to-back iterations do, unless
hide_host=False; on CPU the wall clock). Each row also holds the host's time to queue one call (the
median over repetitions and ranks' slowest), what the hidden start leaves out. A rank's time is the median of
its repetitions; a size's time is the slowest rank's, since an all-reduce is over when the last
rank has the result. Bandwidths follow nccl-tests: algbw = bytes / time, busbw = algbw x 2(p-1)/p
(aisys.collectives.busbw), comparable with one link's one-way bandwidth (aisys.interconnect).
"""

import contextlib
import os
import statistics
import tempfile
import time

from .._validate import one_of, positive_int
from .busbw import bus_bandwidth
from .launch import BACKENDS, rank_device, run_ranks
from .pipelined_ring import CHANNELS

KIB, MIB, GIB = 2**10, 2**20, 2**30
HOST_HIDING_CYCLES = 4_000_000  # ~2 ms at the H200's 1.98 GHz: longer than the ring's host time
ALGORITHMS = ("ring", "baseline")  # the reference ring (no size check), and dist.all_reduce
# The tuned ring (aisys.collectives.pipelined_ring), on NCCL only: slices pipelined with their additions over
# CHANNELS communicators, captured in a CUDA graph. ABLATION adds its steps one at a time.
TUNED = "tuned"
CHANNELED = f"pipelined, {CHANNELS} channels"
ABLATION = ("pipelined", CHANNELED, TUNED)  # the tuned ring is the last, captured in a CUDA graph
# The ring over memory every rank can read (aisys.collectives.symmetric_ring): each step one kernel that reads the
# neighbour's chunk and adds it. On GPUs in PyTorch's symmetric memory, on CPU in shared files. Every algorithm of a
# run that times it then works on its buffer, the one the ranks share.
SYMMETRIC = "symmetric"
# The same ring in one kernel, each slice ordered by its neighbours' flags (aisys.triton_kernels.ring_all_reduce).
ONE_KERNEL = "one kernel"
ON_SYMMETRIC_MEMORY = (SYMMETRIC, ONE_KERNEL)
EXTRA = ABLATION + ON_SYMMETRIC_MEMORY
# (channels, slices) of the captured ring that `settings_sweep` times; the first is what the tuned ring chooses at
# 64 MiB and 256 MiB on 4 ranks. More slices hide more of each addition, but each message costs a kernel of its own.
SETTINGS = ((CHANNELS, CHANNELS), (CHANNELS, 2 * CHANNELS), (2 * CHANNELS, 2 * CHANNELS), (CHANNELS, CHANNELS // 2),
            (CHANNELS // 2, CHANNELS))


def sweep(backend: str) -> list[int]:
    """Message sizes in bytes: 1 KiB to 1 GiB in steps of 4 on GPUs, 1 KiB to 16 MiB on CPU."""
    largest = GIB if one_of("backend", backend, BACKENDS) == "nccl" else 16 * MIB
    sizes, size = [], KIB
    while size <= largest:
        sizes.append(size)
        size *= 4
    return sizes


def compare(sizes, world_size: int, *, backend: str = "gloo", reps: int = 10, warmup: int = 3,
            timeout: float = 60.0, hide_host: bool = True, extra=()) -> list[dict]:
    """One row per size: seconds of the ring and of dist.all_reduce, their bus bandwidths, and whether they agree.

    On GPUs the timing starts once the host has queued the call (`hide_host`), or when the host starts to
    queue it (hide_host=False: the host's time counts, as it does for one call in a training step).
    `extra`: names from EXTRA timed too (those of ABLATION on NCCL only), each row then holding
    `<name>_seconds`, `<name>_busbw` and `<name>_ratio` (its busbw over the baseline's). With the tuned ring and
    a ring on symmetric memory together the ranks run with NCCL_GRAPH_REGISTER=0 (the row's `nccl_env`)."""
    sizes = _float32_sizes(sizes)
    world_size, backend = positive_int("world_size", world_size), one_of("backend", backend, BACKENDS)
    if world_size < 2:
        raise ValueError(f"world_size must be 2 or more (over one rank an all-reduce moves nothing), got {world_size}")
    reps, warmup = positive_int("reps", reps), positive_int("warmup", warmup)
    extra = tuple(one_of("extra[i]", name, EXTRA) for name in extra)
    if set(extra) & set(ABLATION) and backend != "nccl":
        raise ValueError(f"extra algorithms {[n for n in extra if n in ABLATION]} run on NCCL only (CUDA graphs), "
                         f"not on {backend}")
    names = ALGORITHMS + extra
    # NCCL registers the buffers of the operations a CUDA graph captures; with the tuned ring's captured on a buffer
    # in symmetric memory, every GPU hung (4 H100s and 4 H200s, torch 2.11, NCCL 2.28.9) unless told not to
    environment = {"NCCL_GRAPH_REGISTER": "0"} if TUNED in extra and set(extra) & set(ON_SYMMETRIC_MEMORY) else {}
    with tempfile.TemporaryDirectory(prefix="aisys-symmetric-") as folder, _environment(environment):
        arguments = (sizes, reps, warmup, backend, hide_host, names, folder)
        per_rank = run_ranks(_time_on_rank, world_size, [arguments] * world_size,
                             backend=backend, timeout=timeout, wall_timeout=max(600.0, timeout))
    device = per_rank[0]["device"]
    rows = []
    for i, nbytes in enumerate(sizes):
        seconds = {name: max(rank["seconds"][name][i] for rank in per_rank) for name in names}
        host = {name: max(rank["host_seconds"][name][i] for rank in per_rank) for name in names}
        busbw = {name: bus_bandwidth("all_reduce", nbytes, seconds[name], world_size) for name in names}
        rows.append({"bytes": nbytes, "world_size": world_size, "backend": backend, "device": device,
                     "host_hidden": hide_host or backend != "nccl",
                     "ring_seconds": seconds["ring"], "baseline_seconds": seconds["baseline"],
                     "ring_host_seconds": host["ring"], "baseline_host_seconds": host["baseline"],
                     "ring_busbw": busbw["ring"], "baseline_busbw": busbw["baseline"],
                     "ratio": busbw["ring"] / busbw["baseline"],
                     "correct": all(rank["correct"][i] for rank in per_rank), "nccl_env": environment})
        for name in extra:
            rows[-1].update({f"{name}_seconds": seconds[name], f"{name}_host_seconds": host[name],
                             f"{name}_busbw": busbw[name], f"{name}_ratio": busbw[name] / busbw["baseline"]})
    return rows


def _float32_sizes(sizes) -> list[int]:
    """Message sizes in bytes, each positive and a whole number of float32 elements (the buffers' type)."""
    sizes = [positive_int("sizes[i]", s) for s in sizes]
    if any(s % 4 for s in sizes):
        raise ValueError(f"sizes must be multiples of 4 bytes (float32 buffers), got {sizes}")
    return sizes


def _time_on_rank(sizes, reps, warmup, backend, hide_host=True, names=ALGORITHMS, folder=None) -> dict:
    import torch
    import torch.distributed as dist

    from . import pipelined_ring, ring
    from .symmetric_ring import SymmetricRing

    rank = dist.get_rank()
    device = rank_device(backend)
    channels = pipelined_ring.ring_channels() if set(names) & set(ABLATION[1:]) else None
    seconds = {name: [] for name in names}
    host_seconds = {name: [] for name in names}
    correct = []
    on_symmetric_memory = bool(set(names) & set(ON_SYMMETRIC_MEMORY))
    for i, nbytes in enumerate(sizes):
        symmetric = None
        if on_symmetric_memory and backend == "nccl":
            symmetric = SymmetricRing.on_gpus(nbytes // 4)
        elif on_symmetric_memory:
            os.makedirs(files := os.path.join(folder, str(i)), exist_ok=True)  # a ring's files, its own (sizes repeat)
            symmetric = SymmetricRing.in_files(nbytes // 4, files)
        buffer = symmetric.buffer if symmetric else torch.empty(nbytes // 4, device=device)
        # Made per buffer: a captured ring replays on the storage it was captured on.
        algorithms = {
            "ring": lambda x: ring.all_reduce(x, check_sizes=False), "baseline": dist.all_reduce,
            "pipelined": lambda x: pipelined_ring.all_reduce(x, slices=CHANNELS, check_sizes=False),
            CHANNELED: lambda x: pipelined_ring.all_reduce(x, channels=channels, check_sizes=False),
        }
        if TUNED in names:
            algorithms[TUNED] = _replay(pipelined_ring.CapturedAllReduce(buffer, channels=channels))
        if symmetric:
            algorithms[SYMMETRIC] = lambda x, ring=symmetric: ring.all_reduce()  # x is its buffer
            algorithms[ONE_KERNEL] = lambda x, ring=symmetric: ring.all_reduce_in_one_kernel()
        agree = True
        for name in names:
            elapsed, host, summed = _median_run(algorithms[name], buffer, warmup, reps, backend, hide_host)
            seconds[name].append(elapsed)
            host_seconds[name].append(host)
            agree = agree and summed
        correct.append(agree)
    name = torch.cuda.get_device_name(rank) if backend == "nccl" else "CPU (gloo over loopback)"
    return {"seconds": seconds, "host_seconds": host_seconds, "correct": correct, "device": name}


def _median_run(algorithm, buffer, warmup, reps, backend, hide_host=True) -> tuple[float, float, bool]:
    """(median seconds, median host seconds, whether the last run summed right) of `algorithm` on `buffer`."""
    import torch.distributed as dist

    p, rank = dist.get_world_size(), dist.get_rank()
    times, queued = [], []
    for _ in range(warmup + reps):
        buffer.fill_(rank + 1)  # sums of small integers: exact in any order
        elapsed, host = _timed(algorithm, buffer, backend, hide_host)
        times.append(elapsed)
        queued.append(host)
    summed = bool((buffer == p * (p + 1) / 2).all())
    return statistics.median(times[warmup:]), statistics.median(queued[warmup:]), summed


def settings_sweep(sizes, world_size: int, settings=SETTINGS, *, nccl_env=None, reps: int = 10, warmup: int = 3,
                   wall_timeout: float = 300.0) -> list[dict]:
    """The captured pipelined ring at each (channels, slices) in `settings` against NCCL's all_reduce, on GPUs.

    One row per size and setting: its seconds, NCCL's (timed on the same buffer in the same processes just
    before), both bus bandwidths, their ratio and whether the ring summed right. `nccl_env`: NCCL variables set
    for the ranks (they read them when their communicators are made), e.g. {"NCCL_MIN_P2P_NCHANNELS": "64"}."""
    sizes = _float32_sizes(sizes)
    if not sizes:
        raise ValueError("sizes must name one or more message sizes, got none")
    world_size, reps, warmup = (positive_int(name, value) for name, value in
                                (("world_size", world_size), ("reps", reps), ("warmup", warmup)))
    settings = list(settings)
    if not settings or any(not isinstance(setting, (tuple, list)) or len(setting) != 2 for setting in settings):
        raise ValueError(f"settings must be one or more (channels, slices) pairs, got {settings}")
    settings = [(positive_int("channels", c), positive_int("slices", s)) for c, s in settings]
    nccl_env = dict(nccl_env or {})
    if any(not isinstance(k, str) or not k.startswith("NCCL_") or not isinstance(v, str) for k, v in nccl_env.items()):
        raise ValueError(f"nccl_env must map NCCL_... names to strings, got {nccl_env}")
    with _environment(nccl_env):
        per_rank = run_ranks(_settings_on_rank, world_size, [(sizes, settings, reps, warmup)] * world_size,
                             backend="nccl", timeout=60.0, wall_timeout=wall_timeout)
    rows = []
    for i, nbytes in enumerate(sizes):
        baseline = max(rank["baseline"][i] for rank in per_rank)
        for j, (channels, slices) in enumerate(settings):
            seconds = max(rank["seconds"][i][j] for rank in per_rank)
            busbw, baseline_busbw = (bus_bandwidth("all_reduce", nbytes, t, world_size) for t in (seconds, baseline))
            rows.append({"bytes": nbytes, "world_size": world_size, "device": per_rank[0]["device"],
                         "nccl_env": nccl_env, "channels": channels, "slices": slices, "seconds": seconds,
                         "baseline_seconds": baseline, "busbw": busbw, "baseline_busbw": baseline_busbw,
                         "ratio": busbw / baseline_busbw, "correct": all(rank["correct"][i][j] for rank in per_rank)})
    return rows


@contextlib.contextmanager
def _environment(values: dict):
    """os.environ with `values` set, for the ranks forked inside; restored after."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _settings_on_rank(sizes, settings, reps, warmup) -> dict:
    import torch
    import torch.distributed as dist

    from . import pipelined_ring

    groups = pipelined_ring.ring_channels(max(channels for channels, _ in settings))
    baseline, seconds, correct = [], [], []
    for nbytes in sizes:
        buffer = torch.empty(nbytes // 4, device=rank_device("nccl"))
        baseline.append(_median_run(dist.all_reduce, buffer, warmup, reps, "nccl")[0])
        captured = [pipelined_ring.CapturedAllReduce(buffer, slices=slices, channels=groups[:channels])
                    for channels, slices in settings]
        runs = [_median_run(_replay(ring), buffer, warmup, reps, "nccl") for ring in captured]
        seconds.append([elapsed for elapsed, _, _ in runs])
        correct.append([summed for _, _, summed in runs])
    return {"baseline": baseline, "seconds": seconds, "correct": correct,
            "device": torch.cuda.get_device_name(dist.get_rank())}


def _replay(captured):
    """A captured ring as an algorithm of the buffer it was captured on."""
    return lambda buffer: captured()


def _timed(algorithm, buffer, backend, hide_host=True) -> tuple[float, float]:
    """(seconds the operation took, seconds the host took to return from the call)."""
    import torch
    import torch.distributed as dist

    dist.barrier()  # every rank starts together: a late rank would count as the others' waiting time
    if backend != "nccl":
        start = time.perf_counter()
        algorithm(buffer)
        elapsed = time.perf_counter() - start
        return elapsed, elapsed
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if hide_host:
        # The GPU spins while the host queues the algorithm's kernels (the ring's host time is in each row's
        # ring_host_seconds), so the events time the link and the kernels, not the host: what nccl-tests
        # gets by running iterations back to back.
        torch.cuda._sleep(HOST_HIDING_CYCLES)
    start.record()
    queued = time.perf_counter()
    algorithm(buffer)
    queued = time.perf_counter() - queued
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3, queued


def link_for(device: str):
    """The aisys.interconnect Link joining GPUs of this kind (torch's device name), or None (CPU, unknown GPU)."""
    from ..hardware import chip_for_device
    from ..interconnect import GPU_LINK, LINKS

    chip = chip_for_device(device) if device.startswith("NVIDIA") else None
    return LINKS[GPU_LINK[chip.name]] if chip and chip.name in GPU_LINK else None


def size_label(nbytes: int) -> str:
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit} {name}"
    return f"{nbytes} B"


def table(rows: list[dict]) -> str:
    """The rows as a text table; 'of link' is the ring's busbw over the link's one-way bandwidth ('-' on CPU)."""
    if not rows:
        return "(no rows)"
    link = link_for(rows[0]["device"])
    baseline = "NCCL" if rows[0]["backend"] == "nccl" else "gloo"
    more = [name for name in (TUNED, *ON_SYMMETRIC_MEMORY) if f"{name}_busbw" in rows[0]]  # columns of its own for each
    headers = ["size", "ring ms", f"{baseline} ms", "ring busbw GB/s", f"{baseline} busbw GB/s", "ring/" + baseline,
               "ring of link"] + [h for n in more for h in (f"{n} ms", f"{n} busbw GB/s", f"{n}/{baseline}")] + [
        "correct"]
    body = [[size_label(r["bytes"]), f"{r['ring_seconds'] * 1e3:.3f}", f"{r['baseline_seconds'] * 1e3:.3f}",
             f"{r['ring_busbw'] / 1e9:.2f}", f"{r['baseline_busbw'] / 1e9:.2f}", f"{r['ratio']:.2f}",
             f"{r['ring_busbw'] / link.bandwidth:.0%}" if link else "-"]
            + [cell for n in more for cell in (f"{r[f'{n}_seconds'] * 1e3:.3f}", f"{r[f'{n}_busbw'] / 1e9:.2f}",
                                              f"{r[f'{n}_ratio']:.2f}")]
            + ["yes" if r["correct"] else "NO"] for r in rows]
    return _layout(rows, link, headers, body)


def ablation_table(rows: list[dict]) -> str:
    """What each step from the readable ring to the tuned one gives: bus bandwidth and share of the baseline's."""
    names = ["ring", *(name for name in ABLATION if f"{name}_busbw" in rows[0])]
    headers = ["size", "NCCL busbw GB/s", *names]
    body = [[size_label(r["bytes"]), f"{r['baseline_busbw'] / 1e9:.1f}"]
            + [f"{r[f'{n}_busbw' if n != 'ring' else 'ring_busbw'] / 1e9:.1f} "
               f"({r[f'{n}_ratio' if n != 'ring' else 'ratio']:.2f}x)" for n in names] for r in rows]
    return _layout(rows, None, headers, body)


def settings_table(rows: list[dict]) -> str:
    """settings_sweep's rows: per size, NCCL environment and (channels, slices), the ring's busbw and NCCL's."""
    headers = ["size", "NCCL environment", "channels x slices", "ring ms", "NCCL ms", "ring busbw GB/s",
               "NCCL busbw GB/s", "ring/NCCL", "correct"]
    body = [[size_label(r["bytes"]), " ".join(f"{k}={v}" for k, v in r["nccl_env"].items()) or "(default)",
             f"{r['channels']} x {r['slices']}", f"{r['seconds'] * 1e3:.3f}", f"{r['baseline_seconds'] * 1e3:.3f}",
             f"{r['busbw'] / 1e9:.1f}", f"{r['baseline_busbw'] / 1e9:.1f}", f"{r['ratio']:.2f}",
             "yes" if r["correct"] else "NO"] for r in rows]
    return _layout(rows, None, headers, body)


def _layout(rows, link, headers, body) -> str:
    widths = [max(len(line[i]) for line in [headers, *body]) for i in range(len(headers))]
    lines = [headers, ["-" * w for w in widths], *body]
    text = "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(line, widths))).rstrip() for line in lines)
    where = f"{rows[0]['device']}, {rows[0]['world_size']} ranks"
    return f"{where}" + (f"; link: {link.name}, {link.bandwidth / 1e9:.0f} GB/s one way" if link else "") + "\n" + text
