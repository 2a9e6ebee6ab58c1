"""Batching requests for LLM serving: a step-by-step simulation of static, continuous and chunked-prefill scheduling.

An engine runs the model one step (iteration) at a time over a batch of sequences. A request
brings `prompt_len` tokens and wants `output_len` new ones: the step that finishes its prompt
(its prefill) emits its first token, and each later step feeds back the last token (a decode)
and emits one more. Its keys and values live in fixed-size blocks of `block_size` tokens; the
engine has `num_blocks` of them, and that budget, not compute, usually limits the batch.

The rules, fixed so that a schedule is unique (the exercise compares schedules exactly):

- The queue is first come, first served: by arrival time, ties in the order given. A request
  that arrives while a step runs joins the queue when the step ends. When nothing runs and
  nobody waits, the clock jumps to the next arrival.
- A step's time is charged once, at its end: every token it emits (first or later) is stamped
  with the clock after the step. The time comes from `step_time(batch)`, batch being a list of
  (new, cached) token counts per sequence, as `aisys.inference.cost.step_seconds` takes.
- A sequence holding L tokens of keys and values holds ceil(L / block_size) blocks; a step
  allocates, before it runs, the slots of the tokens it feeds. The last token a request emits
  is never fed back, so a request needs at most ceil((prompt_len + output_len - 1) / block_size).

Policies:

- ``static``: when nothing runs, take up to `max_batch` waiting requests (stop at the first whose
  worst-case blocks no longer fit: they are reserved up front), prefill them in one step, decode
  until every one has finished; finished ones leave the computation, but nobody joins until the
  whole batch is done. No preemption is ever needed.
- ``continuous`` (iteration-level scheduling: Yu et al., Orca, OSDI 2022; Kwon et al., vLLM,
  SOSP 2023): every step, first each running request, oldest admission first, gets the block its
  decode token needs; when none is free, the most recently admitted running request is preempted
  (recompute preemption: its blocks are freed, it goes back to the front of the queue, and when
  readmitted it prefills its prompt and the tokens it had generated again, that prefill emitting
  its next token). Then, unless a request was preempted in this step, waiting requests are
  admitted from the front of the queue while fewer than `max_batch` run and the blocks of their
  whole prefill are free; the first that does not fit stops admission (no overtaking).
- ``chunked`` (Agrawal et al., Sarathi-Serve, OSDI 2024): as continuous, but a step carries at
  most `max_tokens` new tokens: the decodes first, then the prefills under way (oldest first),
  then newly admitted ones, each prefill taking as much of its prompt as the budget left allows.
  A prefill's blocks are all allocated when it is admitted; it emits its first token in the step
  of its last chunk. Without a token budget, chunked is the same as continuous.
"""

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np

from .._validate import nonnegative_number, one_of, positive_int, positive_number
from .paged import blocks_for

POLICIES = ("static", "continuous", "chunked")

StepTime = Callable[[list[tuple[int, int]]], float]


@dataclass(frozen=True)
class Request:
    """One request of a trace: it arrives at `arrival` seconds with `prompt_len` tokens and wants `output_len`."""

    id: int
    arrival: float
    prompt_len: int
    output_len: int

    def __post_init__(self):
        if isinstance(self.id, bool) or not isinstance(self.id, Integral):
            raise TypeError(f"Request id must be an integer, got {self.id!r}")
        if isinstance(self.arrival, bool) or not isinstance(self.arrival, Real) or not 0 <= self.arrival < math.inf:
            raise ValueError(f"request {self.id}: arrival must be a finite number of seconds >= 0, got "
                             f"{self.arrival!r}")
        positive_int(f"request {self.id}: prompt_len", self.prompt_len)
        positive_int(f"request {self.id}: output_len", self.output_len)

    @property
    def peak_tokens(self) -> int:
        """Tokens of keys and values it holds at most: everything but its last output token."""
        return self.prompt_len + self.output_len - 1


@dataclass
class RequestRecord:
    """What happened to one request: when its first and last tokens came out, and how often it was preempted."""

    request: Request
    first_token: float = math.nan
    finish: float = math.nan
    preemptions: int = 0

    @property
    def ttft(self) -> float:
        """Time to first token: first token - arrival (queueing plus prefill)."""
        return self.first_token - self.request.arrival

    @property
    def tpot(self) -> float:
        """Time per output token after the first: (finish - first token) / (output_len - 1); NaN for one token."""
        later = self.request.output_len - 1
        return (self.finish - self.first_token) / later if later else math.nan

    @property
    def latency(self) -> float:
        """End-to-end latency: finish - arrival."""
        return self.finish - self.request.arrival


@dataclass(frozen=True)
class Step:
    """One iteration: when it started, how long it took, what it carried and what it evicted."""

    start: float
    seconds: float
    batch: tuple[tuple[int, int, int], ...]  # (request id, new tokens, cached tokens) per sequence
    blocks_used: int  # after this step's allocations, before finished requests free theirs
    preempted: tuple[int, ...]  # request ids preempted before this step ran
    emitted: tuple[int, ...]  # request ids that got a token out of this step (a chunk short of the prompt gets none)


@dataclass
class Schedule:
    """The result of a simulation: a record per request (in the order given) and every step."""

    policy: str
    records: list[RequestRecord]
    steps: list[Step]


def linear_step_time(a: float, b: float) -> StepTime:
    """A step costs `a` seconds plus `b` per new token: a toy cost one can add up by hand."""
    a, b = nonnegative_number("a", a), nonnegative_number("b", b)
    if a == 0 and b == 0:
        raise ValueError("a and b cannot both be 0: every step must take time")
    return lambda batch: a + b * sum(new for new, _ in batch)


def roofline_step_time(config=None, chip=None, dtype: str = "bf16") -> StepTime:
    """The roofline's lower bound on a step (`cost.step_seconds`); default Llama-3-8B on an H100 SXM in bf16."""
    from ..hardware import CHIPS, Chip
    from . import cost
    from .model import MODELS, ModelConfig

    config = MODELS["Llama-3-8B"] if config is None else config
    chip = CHIPS["NVIDIA H100 SXM5 80GB"] if chip is None else chip
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
    if not isinstance(chip, Chip):
        raise TypeError(f"chip must be an aisys.hardware.Chip, got {type(chip).__name__}")
    chip.peak(dtype)  # fails now, naming the dtype, rather than at the first step
    return lambda batch: cost.step_seconds(config, batch, chip, dtype)


def simulate(requests: Iterable[Request], policy: str = "continuous", *, num_blocks: int, block_size: int = 16,
             max_batch: int = 256, max_tokens: int | None = None, step_time: StepTime | None = None) -> Schedule:
    """Serve `requests` under `policy` with `num_blocks` blocks of `block_size` tokens; see the module's rules.

    `max_tokens` is the chunked policy's token budget per step (required there, and at least
    `max_batch`, so that the decodes of a full batch always fit); `step_time` defaults to the
    roofline of Llama-3-8B on an H100.
    """
    requests = _check_requests(requests)
    policy = one_of("policy", policy, POLICIES)
    num_blocks, block_size = positive_int("num_blocks", num_blocks), positive_int("block_size", block_size)
    max_batch = positive_int("max_batch", max_batch)
    if policy == "chunked":
        if max_tokens is None:
            raise ValueError("max_tokens (the token budget per step) is required by the chunked policy")
        if positive_int("max_tokens", max_tokens) < max_batch:
            raise ValueError(f"max_tokens must be >= max_batch ({max_batch}) so that a full batch's decodes fit, "
                             f"got {max_tokens}")
    elif max_tokens is not None:
        raise ValueError(f"max_tokens is the chunked policy's token budget; policy {policy!r} takes none")
    for request in requests:
        if blocks_for(request.peak_tokens, block_size) > num_blocks:
            raise ValueError(f"num_blocks={num_blocks} cannot hold request {request.id}: its "
                             f"{request.prompt_len} + {request.output_len} - 1 tokens need "
                             f"{blocks_for(request.peak_tokens, block_size)} blocks of {block_size}")
    if step_time is None:
        step_time = roofline_step_time()
    elif not callable(step_time):
        raise TypeError(f"step_time must be a function of the batch [(new, cached), ...], got {step_time!r:.80}")
    engine = _Engine(requests, policy, num_blocks, block_size, max_batch, max_tokens or math.inf, step_time)
    return engine.run()


@dataclass(eq=False)
class _Sequence:
    """A request's state inside the engine."""

    record: RequestRecord
    generated: int = 0  # output tokens emitted so far
    cached: int = 0  # tokens whose keys and values are in the cache
    target: int = 0  # tokens the current prefill must bring into the cache
    blocks: int = 0
    chunk: int = 0  # new tokens it feeds in the step being planned

    @property
    def request(self) -> Request:
        return self.record.request

    @property
    def prefilling(self) -> bool:
        return self.cached < self.target


@dataclass
class _Engine:
    requests: list[Request]
    policy: str
    num_blocks: int
    block_size: int
    max_batch: int
    max_tokens: float
    step_time: StepTime
    clock: float = 0.0
    free: int = 0
    running: list[_Sequence] = field(default_factory=list)  # in admission order
    waiting: deque = field(default_factory=deque)
    steps: list[Step] = field(default_factory=list)

    def run(self) -> Schedule:
        self.free = self.num_blocks
        sequences = [_Sequence(RequestRecord(request)) for request in self.requests]
        # stable sort: equal arrivals keep the order given
        pending = deque(sorted(sequences, key=lambda s: s.request.arrival))
        while pending or self.waiting or self.running:
            while pending and pending[0].request.arrival <= self.clock:
                self.waiting.append(pending.popleft())
            if not (self.waiting or self.running):
                self.clock = pending[0].request.arrival
                continue
            preempted = self._plan_static() if self.policy == "static" else self._plan_iteration()
            self._run_step(preempted)
        return Schedule(self.policy, [s.record for s in sequences], self.steps)

    def _plan_static(self) -> list[_Sequence]:
        """A new batch when the last one is done, its worst case reserved; otherwise decode the batch."""
        if not self.running:
            while self.waiting and len(self.running) < self.max_batch:
                reserve = blocks_for(self.waiting[0].request.peak_tokens, self.block_size)
                if reserve > self.free:
                    break
                sequence = self._admit(self.waiting.popleft(), blocks=reserve)
                sequence.chunk = sequence.target
        else:
            for sequence in self.running:
                sequence.chunk = 1
        return []

    def _plan_iteration(self) -> list[_Sequence]:
        """Continuous and chunked: decodes first (preempting the newest when blocks run out), then prefills."""
        preempted = []
        for sequence in list(self.running):
            sequence.chunk = 0
            if sequence.prefilling or sequence not in self.running:
                continue
            need = blocks_for(sequence.cached + 1, self.block_size) - sequence.blocks
            while need > self.free and sequence in self.running:
                preempted.append(self._preempt(self.running[-1]))
            if sequence in self.running:
                sequence.blocks += need
                self.free -= need
                sequence.chunk = 1
        budget = self.max_tokens - sum(s.chunk for s in self.running)
        for sequence in self.running:
            if sequence.prefilling:
                sequence.chunk = min(sequence.target - sequence.cached, budget)
                budget -= sequence.chunk
        while not preempted and self.waiting and len(self.running) < self.max_batch and budget > 0:
            head = self.waiting[0]
            need = blocks_for(head.request.prompt_len + head.generated, self.block_size)
            if need > self.free:
                break
            sequence = self._admit(self.waiting.popleft(), blocks=need)
            sequence.chunk = min(sequence.target, budget)
            budget -= sequence.chunk
        return preempted

    def _admit(self, sequence: _Sequence, blocks: int) -> _Sequence:
        sequence.target = sequence.request.prompt_len + sequence.generated  # a preempted one recomputes its output
        sequence.blocks, sequence.cached = blocks, 0
        self.free -= blocks
        self.running.append(sequence)
        return sequence

    def _preempt(self, sequence: _Sequence) -> _Sequence:
        self.running.remove(sequence)
        self.free += sequence.blocks
        sequence.blocks = sequence.cached = sequence.target = sequence.chunk = 0
        sequence.record.preemptions += 1
        self.waiting.appendleft(sequence)  # the newest goes first, so older victims end up ahead of it
        return sequence

    def _run_step(self, preempted: list[_Sequence]) -> None:
        batch = [s for s in self.running if s.chunk > 0]
        if not batch:
            raise AssertionError("scheduler planned an empty step")  # a bug: the checks on requests rule it out
        used = self.num_blocks - self.free
        if used > self.num_blocks or any(s.blocks < blocks_for(s.cached + s.chunk, self.block_size) for s in batch):
            raise AssertionError("scheduler overran its block budget")
        pairs = [(s.chunk, s.cached) for s in batch]
        seconds = self.step_time(pairs)
        if isinstance(seconds, bool) or not isinstance(seconds, Real) or not math.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"step_time must return a finite number of seconds > 0, got {seconds!r} for {pairs}")
        start, self.clock = self.clock, self.clock + seconds
        emitted = []
        for sequence in batch:
            sequence.cached += sequence.chunk
            sequence.chunk = 0
            if not sequence.prefilling:  # a chunk short of the end of the prompt emits nothing
                emitted.append(sequence.request.id)
                self._emit(sequence)
        ids = [s.request.id for s in batch]
        self.steps.append(Step(start, float(seconds), tuple((i, *pair) for i, pair in zip(ids, pairs)), used,
                               tuple(s.request.id for s in preempted), tuple(emitted)))

    def _emit(self, sequence: _Sequence) -> None:
        """One more output token, stamped with the clock at the end of the step."""
        sequence.generated += 1
        if sequence.generated == 1:
            sequence.record.first_token = self.clock
        if sequence.generated == sequence.request.output_len:
            sequence.record.finish = self.clock
            self.running.remove(sequence)
            self.free += sequence.blocks
            sequence.blocks = 0


def _check_requests(requests) -> list[Request]:
    try:
        requests = list(requests)
    except TypeError:
        raise TypeError(f"requests must be an iterable of Request, got {requests!r:.80}") from None
    if not requests:
        raise ValueError("requests must hold at least one Request")
    for i, request in enumerate(requests):
        if not isinstance(request, Request):
            raise TypeError(f"requests[{i}] must be a Request, got {request!r:.80}")
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError(f"requests must have distinct ids; repeated: {sorted({i for i in ids if ids.count(i) > 1})}")
    return requests


def metrics(schedule: Schedule) -> dict:
    """Throughput and latency of a schedule: output tokens per second over the makespan, p50 and p99 of TTFT,
    TPOT (requests of at least 2 output tokens; NaN if none) and end-to-end latency, and the preemptions."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule (from simulate), got {type(schedule).__name__}")
    records = schedule.records
    start = min(r.request.arrival for r in records)
    makespan = max(r.finish for r in records) - start
    output_tokens = sum(r.request.output_len for r in records)
    summary = {"requests": len(records), "output_tokens": output_tokens, "makespan": makespan,
               "throughput": output_tokens / makespan, "preemptions": sum(r.preemptions for r in records)}
    tpots = [r.tpot for r in records if r.request.output_len > 1]
    latencies = [r.latency for r in records]
    for name, values in (("ttft", [r.ttft for r in records]), ("tpot", tpots), ("latency", latencies)):
        for q in (50, 99):
            summary[f"{name}_p{q}"] = float(np.percentile(values, q)) if values else math.nan
    return summary


def synthetic_trace(n: int, rate: float, *, seed: int = 0, prompt: Sequence[float] = (100, 1.0),
                    output: Sequence[float] = (200, 0.8), max_len: int = 2048) -> list[Request]:
    """`n` requests arriving as a Poisson process of `rate` per second, lengths lognormal and clipped to [1, max_len].

    `prompt` and `output` are (median, sigma) of the lognormal. The defaults give means near those of
    ShareGPT conversations as Kwon et al. (vLLM, SOSP 2023, Fig. 11) report them, about 160 prompt and
    280 output tokens, with the long tail that makes a batch's longest member much longer than its
    typical one, which is what static batching pays for.
    """
    n, rate = positive_int("n", n), positive_number("rate", rate)
    max_len = positive_int("max_len", max_len)
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    lengths = {}
    for name, (median, sigma) in (("prompt", prompt), ("output", output)):
        positive_number(f"{name} median", median)
        positive_number(f"{name} sigma", sigma)
        lengths[name] = np.clip(np.rint(rng.lognormal(math.log(median), sigma, n)), 1, max_len).astype(int)
    return [Request(i, float(arrivals[i]), int(lengths["prompt"][i]), int(lengths["output"][i])) for i in range(n)]
