"""Speed checks: a student's kernel timed on a GPU as a fraction of this GPU's limit, measured in the same run.

    SOFTMAX = speed.Workload("softmax_rows", (speed.Input((16384, 4096), "fp32", std=3.0),), args=("fp32",),
                             reference=lambda x, dtype: torch.softmax(x, dim=1), rtol=1e-5,
                             limit=speed.copy_limit(2 * 16384 * 4096 * 4), work=2 * 16384 * 4096 * 4, unit="bytes",
                             label="a 16384 x 4096 fp32 matrix", reps=2400, floor=0.4, hint="...")

    @check(points=1)
    def softmax_rows_speed(student, rng, hidden):
        require_gpu(optional=True)  # skipped without a GPU; the notebook is graded without it
        speed.require(student, SOFTMAX, at_least=0.4)

How one measurement goes (`measure`; the checks of one function share it):

1. A warm-up call (compiles), its results checked. Where the workload has `choices` (a GEMM's tile
   configs), a short timed call of each, and the fastest is measured.
2. In the grader's process, the loop of reps.py runs `reps` repetitions with a no-op function (the loop's
   own cost: making inputs, digesting results) and with the limit (a copy moving the kernel's bytes, cuBLAS,
   torch's attention); each run is timed whole on the wall clock, twice, and the faster kept (a run can only
   be disturbed into taking longer).
3. The student's call: the same loop, in the student's process, on inputs from fresh seeds, timed whole on
   the grader's wall clock (bridge included), with a time budget that stops code far slower than the floor.
4. Every repetition's digests are checked against the grader's reference on the same seeds; then
   per repetition, student = (call - n x no-op) / n and limit = (limit run - no-op run) / reps.

Seeds are fresh entropy, never the check's generator, so visible and hidden runs are alike and share one
measurement: the second check of a function, and its hidden run, reuse the first's.

Why the student's process, which can patch everything in it (the loop included), cannot buy a better grade:

- Time: the grader's wall clock around the whole call; the reply holds no time. (CUDA events, as aisys.bench
  times kernels, would be recorded in the student's process, and so be the student's to forge.) The bridge's
  round trip is in it: the reps make it a few percent. The only thing subtracted is the loop's own work,
  measured by the grader in its own process: doing less of it means skipping the inputs (then the results are
  wrong) or the digests (then they do not match), and overlapping it with the kernel hides at most its share.
  A forged or slowed reply only makes the student slower.
- Work: each repetition's inputs come from a seed sent in that very call and are made on the device, so
  nothing can be computed before the call or remembered from another; each result's digest (its dot product
  with random weights from a seed of the same call) is checked for every repetition the reply claims, so a
  repetition skipped or answered from elsewhere fails the check.
- Count: the reply says how many repetitions ran (a budget may stop the loop). Claiming more needs their
  right digests; claiming fewer than ran raises the time per repetition.
- Cache: each repetition's inputs are written a repetition before they are read, with far more than the L2
  cache holds written and read in between (the next inputs, the last digest), so the kernel reads them from
  memory. No separate flush (aisys.bench's): it would be a step of the loop that a student could skip.

What a speed check cannot tell is whose kernel ran: a function that calls torch's own op is as fast as torch.
That is for the correctness checks. The message of a check quotes timings, never a case's values.
"""

import math
import secrets
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import reps
from .compare import CheckFailure

DEVICE = "cuda"  # where measurements run (tests of the protocol use the CPU)
TOLERANCE_SIGMAS = 6.0  # a digest may be off by this many times the error rounding at `rtol` per element gives
DIGEST_RTOL = 1e-5  # the least rtol: a digest is a float32 dot product, itself rounded
CHOICE_REPS = 10  # repetitions of the short call that times each choice
BUDGET = 4.0  # the timed run's time budget lets code at 1 / BUDGET of the floor's speed run every repetition
GRADER_RUNS = 2  # the grader times its no-op and its limit this many times each, and keeps the fastest


@dataclass(frozen=True)
class Input:
    """A tensor of each repetition's inputs: normal(mean, std) of `shape`, in `dtype` ("fp32", "fp16", "bf16")."""

    shape: tuple[int, ...]
    dtype: str = "fp32"
    mean: float = 0.0
    std: float = 1.0


@dataclass(frozen=True)
class Limit:
    """What a time is a fraction of: `make(outputs)` gives the function the grader times in the loop (it takes the
    inputs and arguments and returns results shaped as `outputs`, a list of tensors: digesting them costs what
    digesting the student's does); `name` as a message says it."""

    name: str
    make: Callable[[list], Callable]


def copy_limit(nbytes: int) -> Limit:
    """The copy bandwidth: a torch device-to-device copy moving `nbytes` (read and written together)."""

    def make(outputs):
        import torch

        source = torch.ones(int(nbytes) // 8, dtype=torch.float32, device=DEVICE)
        target = torch.empty_like(source)

        def copy(*inputs, **options):
            target.copy_(source)
            return outputs

        return copy

    return Limit("this GPU's copy bandwidth", make)


def op_limit(name: str, function: Callable) -> Limit:
    """The vendor's own op: `function` takes what the student's takes and returns results as the student's."""
    return Limit(name, lambda outputs: function)


@dataclass(frozen=True)
class Workload:
    """A student's function, timed on the device.

    function   its name in the notebook; called with the `inputs` tensors (torch, or CuPy with arrays="cupy"),
               then `args` and `kwargs`; it returns a tensor, an array, a number, or a list of them
    reference  the same in the grader (torch ops on the same tensors): a tensor or a list of tensors
    rtol       the error per element a right result may have against the reference
    limit      what its time is a fraction of; `work` (bytes or flops, by `unit`) for the rates messages quote
    label      the inputs as messages say them ("an 8192 x 8192 fp32 matrix")
    reps       repetitions of the timed run: enough for 0.3 s of the solution's kernel time or more, so that the
               bridge's round trip (10 to 20 ms in a grading kernel) costs a few percent
    floor      the lowest fraction any check of the workload asks: the timed run stops once code is far slower
    hint       one sentence for code below a threshold: the better way
    choices    student -> a list of keyword arguments to try (a GEMM's tile configs); the fastest is measured
    """

    function: str
    inputs: tuple[Input, ...]
    reference: Callable
    rtol: float
    limit: Limit
    work: float
    unit: str
    label: str
    reps: int
    floor: float
    hint: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    arrays: str = "torch"
    choices: Callable | None = None

    def __post_init__(self):
        if self.unit not in ("bytes", "flops"):
            raise ValueError(f"unit must be 'bytes' or 'flops', got {self.unit!r}")
        if not 0 < self.floor <= 1:
            raise ValueError(f"floor must be a fraction in (0, 1], got {self.floor!r}")


@dataclass(frozen=True)
class Measurement:
    seconds: float  # the student's function, per repetition
    limit_seconds: float  # the limit's, per repetition, in the same run
    reps: int  # repetitions of the student's timed run (fewer than planned where its time budget ran out)
    planned: int
    choice: dict  # the keyword arguments measured (of `choices`)

    @property
    def fraction(self) -> float:
        return self.limit_seconds / self.seconds


_measured: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # student -> {function: outcome}


def require(student, workload: Workload, at_least: float) -> Measurement:
    """CheckFailure unless the student's function runs at `at_least` (a fraction) of the limit or more."""
    __tracebackhide__ = True
    if not workload.floor <= at_least:
        raise ValueError(f"{workload.function}: at_least={at_least} is below the workload's floor {workload.floor}")
    found = measure(student, workload)
    if found.fraction < at_least:
        raise CheckFailure(f"{describe(workload, found)}; this check asks for {at_least:.0%}. {workload.hint}")
    return found


def measure(student, workload: Workload) -> Measurement:
    """The student's time per repetition against the limit's (see the module's docstring); measured once per
    student and workload, so that the checks of one function share it (a failure too)."""
    __tracebackhide__ = True
    known = _measured.setdefault(student, {})
    if workload.function not in known:
        try:
            known[workload.function] = _measure(student, workload)
        except CheckFailure as failure:
            known[workload.function] = failure
    if isinstance(known[workload.function], CheckFailure):
        raise CheckFailure(str(known[workload.function]))
    return known[workload.function]


def describe(workload: Workload, found: Measurement) -> str:
    """What a measurement found, in a sentence."""
    scale, unit = (1e9, "GB/s") if workload.unit == "bytes" else (1e12, "TFLOP/s")
    config = f" (with {_kwargs(found.choice)})" if found.choice else ""
    stopped = (f", the run stopped after {found.reps} of {found.planned} repetitions by its time budget"
               if found.reps < found.planned else "")
    return (f"{workload.function} of {workload.label}{config} took {found.seconds * 1e3:.3f} ms a repetition "
            f"({workload.work / found.seconds / scale:,.0f} {unit}{stopped}): {found.fraction:.0%} of "
            f"{workload.limit.name}, measured in the same run ({found.limit_seconds * 1e3:.3f} ms, "
            f"{workload.work / found.limit_seconds / scale:,.0f} {unit})")


def _measure(student, workload: Workload) -> Measurement:
    __tracebackhide__ = True
    choices = workload.choices(student) if workload.choices else [{}]
    # the warm-up: compiles, and shows a wrong result before anything is timed
    first = _checked_call(student, workload, choices[0], 2, math.inf, "the warm-up call")[0]
    template = [_zeros_like(t) for t in first]
    noop, limit = (lambda *inputs, **options: template), workload.limit.make(template)
    runs = [(_timed_here(noop, workload), _timed_here(limit, workload)) for _ in range(GRADER_RUNS)]
    per_rep = min(n for n, _ in runs) / workload.reps  # the least disturbed of the grader's runs
    limit_seconds = max(min(t for _, t in runs) / workload.reps - per_rep, 1e-9)
    budget = BUDGET * (per_rep + limit_seconds / workload.floor)  # a repetition's share of the time budget
    choice = choices[0]
    if len(choices) > 1:
        times = []
        for c in choices:
            _checked_call(student, workload, c, 2, 2 * budget, "the warm-up call")
            _, seconds, done = _checked_call(student, workload, c, CHOICE_REPS, CHOICE_REPS * budget, "a short run")
            times.append(seconds / done)
        choice = choices[times.index(min(times))]
    _, seconds, done = _checked_call(student, workload, choice, workload.reps, workload.reps * budget, "the timed run")
    return Measurement(max(seconds / done - per_rep, 1e-9), limit_seconds, done, workload.reps, choice)


def _plan(workload: Workload, choice: dict, count: int, budget: float) -> dict:
    seeds = [_seed() for _ in range(count)]  # nobody can know them before the call
    return {"reps": count, "seconds": budget if math.isfinite(budget) else 1e9, "seeds": seeds,
            "weights": _seed(), "inputs": [[list(i.shape), i.dtype, i.mean, i.std] for i in workload.inputs],
            "args": list(workload.args), "kwargs": {**workload.kwargs, **choice}, "arrays": workload.arrays,
            "device": DEVICE}


def _checked_call(student, workload: Workload, choice: dict, count: int, budget: float, which: str):
    """The student's function in the loop: (the reference's results of the first repetition, the grader's wall
    seconds of the call, the repetitions run). CheckFailure unless every repetition's digests are right."""
    __tracebackhide__ = True
    plan = _plan(workload, choice, count, budget)
    reply, seconds = student.repeated_call(workload.function, plan)
    shapes, digests = _read(workload.function, reply, count)
    first = None
    for r in range(len(digests)):
        expected = _reference(workload, plan, r)
        first = expected if first is None else first
        if shapes != [list(t.shape) for t in expected]:
            raise CheckFailure(f"{workload.function} of {workload.label} returned results of shapes {shapes}, "
                               f"expected {[list(t.shape) for t in expected]}")
        for j, (got, want) in enumerate(zip(digests[r], expected)):
            weights = reps.weights_for(want.numel(), plan["weights"], j, DEVICE).double()
            exact = float((want.double().reshape(-1) * weights).sum())
            spread = float((want.double().reshape(-1) * weights).norm())
            off, allowed = abs(float(got) - exact), TOLERANCE_SIGMAS * max(workload.rtol, DIGEST_RTOL)
            if not off <= allowed * spread + 1e-30:  # NaN fails too
                what = f"result {j + 1}" if len(expected) > 1 else "result"
                raise CheckFailure(
                    f"{which}: {workload.function} of {workload.label} gave a wrong {what} in repetition {r + 1} of "
                    f"{len(digests)} (a random weighted sum of its elements is off by {off / max(spread, 1e-300):.2g} "
                    f"of its spread, where rounding allows {allowed:.2g}): only a right result's speed is graded")
    return first, seconds, len(digests)


def _read(function: str, reply, planned: int) -> tuple[list, np.ndarray]:
    """The shapes and digests of a reply, re-checked: a mapping of exactly those, digests (n, results), n <= plan."""
    try:
        shapes, digests = reply["shapes"], reply["digests"]
        ok = (isinstance(shapes, list) and all(isinstance(s, list) and all(type(n) is int for n in s) for s in shapes)
              and isinstance(digests, np.ndarray) and digests.ndim == 2 and digests.dtype.kind == "f"
              and 1 <= digests.shape[0] <= planned and digests.shape[1] == len(shapes) >= 1)
    except (KeyError, TypeError):
        ok = False
    if not ok:
        raise CheckFailure(f"{function}, run repeatedly by the grader, gave no readable results")
    return shapes, digests


def _reference(workload: Workload, plan: dict, r: int) -> list:
    """The grader's results for repetition r of a plan: the reference on the same inputs."""
    tensors = reps.inputs(plan["inputs"], plan["seeds"][r], DEVICE)
    value = workload.reference(*tensors, *workload.args, **workload.kwargs)
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _timed_here(function: Callable, workload: Workload) -> float:
    """Wall seconds of the loop of reps.py in this process, with `function` in place of the student's."""
    plan = _plan(workload, {}, workload.reps, math.inf)
    plan["arrays"] = "torch"
    _synchronize()
    start = time.perf_counter()
    reps.run(function, plan)
    return time.perf_counter() - start


def _zeros_like(tensor):
    import torch

    return torch.zeros_like(tensor)


def _synchronize():
    if DEVICE == "cuda":
        import torch

        torch.cuda.synchronize()


def _seed() -> int:
    return secrets.randbits(62)


def _kwargs(choice: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in choice.items())
