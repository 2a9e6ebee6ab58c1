"""Record the point-to-point messages and collectives a process posts, and catch collectives where they are not allowed.

Every torch.distributed call, whether `dist.send`, `dist.isend`, `batch_isend_irecv` or a
collective, reaches the process group's methods, so the recorder wraps those
(`ProcessGroup.send`, `.recv`, `.allreduce`, ...) rather than the module's functions:
a name imported before recording started is recorded all the same.

Everything recorded carries `seq`, its place in the one order of this rank's log, so that a
grader's own notes (`Traffic.mark`, say "the gradient of parameter 3 is ready") can be set
against when a collective was issued: a call is recorded when it is posted, before it
completes, which is what overlapping communication with computation is about.
"""

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

# ProcessGroup method -> the torch.distributed function a learner calls.
COLLECTIVES = {
    "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "allgather": "all_gather", "_allgather_base": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor",
    "allgather_coalesced": "all_gather", "allgather_into_tensor_coalesced": "all_gather_into_tensor",
    "all_gather_single_coalesced": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "reduce_scatter_single_coalesced": "reduce_scatter_tensor",
    "alltoall": "all_to_all", "alltoall_base": "all_to_all_single", "all_to_all_single": "all_to_all_single",
    "barrier": "barrier", "monitored_barrier": "monitored_barrier",
}


class CollectiveNotAllowed(RuntimeError):
    """A collective was called where only point-to-point messages are allowed."""


@dataclass(frozen=True)
class Message:
    """One point-to-point message as this rank saw it: `kind` is 'send' or 'recv'; peer -1 is 'any source'."""

    kind: str
    peer: int
    dtype: str
    numel: int
    nbytes: int
    seq: int = 0

    def to_plain(self) -> dict:
        return {"kind": self.kind, "peer": self.peer, "dtype": self.dtype, "numel": self.numel, "nbytes": self.nbytes,
                "seq": self.seq}


@dataclass(frozen=True)
class Collective:
    """One collective as this rank posted it: `name` as torch.distributed spells the function, and the size of
    its largest tensor argument counted whole (an all-gather's output with all p pieces, a reduce-scatter's
    input), which is the `n` of the cost formulas."""

    name: str
    dtype: str
    numel: int
    nbytes: int
    seq: int

    def to_plain(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "numel": self.numel, "nbytes": self.nbytes, "seq": self.seq}


@dataclass(frozen=True)
class Mark:
    """A note the recording code itself put in the log, with whatever plain `info` it wants to keep."""

    label: str
    info: dict
    seq: int

    def to_plain(self) -> dict:
        return {"label": self.label, "info": dict(self.info), "seq": self.seq}


@dataclass
class Traffic:
    """What one rank did while recording: its messages and its collectives in the order posted, and the marks."""

    messages: list[Message] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    posted: int = 0  # how many entries the log holds: the next one's seq

    def next_seq(self) -> int:
        self.posted += 1
        return self.posted - 1

    def mark(self, label: str, **info) -> None:
        """Note that `label` happened now, between the calls recorded before and after."""
        self.marks.append(Mark(label, info, self.next_seq()))

    def timeline(self) -> list:
        """Messages, collectives and marks, in the order they were recorded."""
        return sorted([*self.messages, *self.collectives, *self.marks], key=lambda entry: entry.seq)

    def sent(self) -> list[Message]:
        return [m for m in self.messages if m.kind == "send"]

    def bytes_sent(self) -> int:
        return sum(m.nbytes for m in self.sent())


def _message(kind: str, tensors, peer: int, seq: int = 0) -> Message:
    tensor = tensors[0]
    dtype = str(tensor.dtype).removeprefix("torch.")
    return Message(kind, int(peer), dtype, tensor.numel(), tensor.numel() * tensor.element_size(), seq)


def _tensors(value) -> list:
    """The tensors in an argument: a tensor, or lists of them nested."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _collective(name: str, args, seq: int) -> Collective:
    """The collective with its largest argument: of each argument, the sum of the tensors it holds."""
    sizes = [(sum(t.numel() for t in ts), ts[0]) for ts in map(_tensors, args) if ts]
    numel, first = max(sizes, key=lambda size: size[0] * size[1].element_size(), default=(0, None))
    dtype = str(first.dtype).removeprefix("torch.") if first is not None else ""
    return Collective(name, dtype, numel, numel * (first.element_size() if first is not None else 0), seq)


@contextlib.contextmanager
def record(allow_collectives: bool = False):
    """Record this process's point-to-point messages into the Traffic it yields.

    A collective called inside raises CollectiveNotAllowed naming it, unless `allow_collectives`,
    in which case it is recorded. Ranks are the group's own (the default group's are global).
    """
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this build of PyTorch")
    group_class = torch._C._distributed_c10d.ProcessGroup
    traffic = Traffic()
    # The raw class attributes, to put back as they were (getattr would give pybind's unbound function).
    saved = {name: group_class.__dict__[name] for name in ("send", "recv", "recv_anysource", *COLLECTIVES)
             if name in group_class.__dict__}
    originals = {name: getattr(group_class, name) for name in saved}

    def send(self, tensors, peer, *rest):
        traffic.messages.append(_message("send", tensors, peer, traffic.next_seq()))
        return originals["send"](self, tensors, peer, *rest)

    def recv(self, tensors, peer, *rest):
        traffic.messages.append(_message("recv", tensors, peer, traffic.next_seq()))
        return originals["recv"](self, tensors, peer, *rest)

    def recv_anysource(self, tensors, *rest):
        traffic.messages.append(_message("recv", tensors, -1, traffic.next_seq()))
        return originals["recv_anysource"](self, tensors, *rest)

    def collective(method: str):
        name = COLLECTIVES[method]

        def called(self, *args, **kwargs):
            if not allow_collectives:
                raise CollectiveNotAllowed(f"dist.{name} was called, but only point-to-point messages are allowed here "
                                           "(dist.send, dist.recv, dist.isend, dist.irecv, dist.batch_isend_irecv)")
            traffic.collectives.append(_collective(name, args, traffic.next_seq()))
            return originals[method](self, *args, **kwargs)
        return called

    wrappers = {"send": send, "recv": recv, "recv_anysource": recv_anysource}
    try:
        for method in originals:
            setattr(group_class, method, wrappers.get(method) or collective(method))
        yield traffic
    finally:
        for method, attribute in saved.items():
            setattr(group_class, method, attribute)
