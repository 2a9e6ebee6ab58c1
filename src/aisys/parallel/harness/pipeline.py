"""The trusted driver of the pipeline exercise: one stage (its model chunks) per rank, built from a seed, around the
student's executor; it records the messages posted and when each chunk's forward and backward ran.

Every rank builds the same p * v layers (Linear then tanh, float64) from the seed and keeps its own chunks: chunk c
of rank s is layer c * p + s. It hands the student's `run_pipeline` the rank's operations, one forward function per
chunk (which notes "forward" when called and "backward" when the gradient of its output is computed), the
micro-batches and their targets, and the whole batch's number of rows; then returns the gradients the chunks
accumulated and the rank's timeline. No reference is imported here.
"""

import torch
import torch.distributed as dist

from aisys.collectives import traffic
from aisys.collectives.launch import rank_device


def build(seed: int, layers: int, m: int, rows: int, width: int) -> dict:
    """The model and the data, the same on every rank and in the grader: weights (layers, width, width) scaled by
    1/sqrt(width), biases (layers, width), inputs and targets (m, rows, width), float64 on the CPU."""
    generator = torch.Generator().manual_seed(int(seed))

    def normal(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    return {"weights": normal(layers, width, width) / width ** 0.5, "biases": normal(layers, width) * 0.1,
            "inputs": normal(m, rows, width), "targets": normal(m, rows, width) * 0.5}


def run_stage(student, ops, seed, v, m, rows, width) -> dict:
    """On one rank: build the stage, run the student's run_pipeline(ops, forwards, inputs, targets, batch) under the
    traffic recorder, and return {"weight_grads", "bias_grads": per chunk (zeros where none accumulated),
    "missing": chunks left without a gradient, "timeline": messages and forward/backward marks in order,
    "collectives": names of the collectives called}."""
    rank, p = dist.get_rank(), dist.get_world_size()
    device = rank_device(dist.get_backend())
    model = build(seed, p * v, m, rows, width)
    weights = [model["weights"][c * p + rank].clone().to(device).requires_grad_() for c in range(v)]
    biases = [model["biases"][c * p + rank].clone().to(device).requires_grad_() for c in range(v)]
    inputs = [x.to(device) for x in model["inputs"]]
    targets = [t.to(device) for t in model["targets"]]
    ops = [tuple(op) for op in ops]

    with traffic.record(allow_collectives=True) as log:
        def chunk_forward(c):
            def forward(x):
                log.mark("forward", chunk=c)
                y = torch.tanh(x @ weights[c].T + biases[c])
                if y.requires_grad:
                    y.register_hook(lambda grad: log.mark("backward", chunk=c))
                return y
            return forward

        student["run_pipeline"](ops, [chunk_forward(c) for c in range(v)], inputs, targets, m * rows)

    timeline = []
    for entry in log.timeline():
        if isinstance(entry, traffic.Message):
            timeline.append({"kind": entry.kind, "peer": entry.peer, "dtype": entry.dtype, "numel": entry.numel})
        elif isinstance(entry, traffic.Mark):
            timeline.append({"kind": entry.label, "chunk": entry.info["chunk"]})
    missing = [c for c in range(v) if weights[c].grad is None or biases[c].grad is None]
    return {"weight_grads": [(w.grad if w.grad is not None else torch.zeros_like(w)).detach().cpu() for w in weights],
            "bias_grads": [(b.grad if b.grad is not None else torch.zeros_like(b)).detach().cpu() for b in biases],
            "missing": missing, "timeline": timeline, "collectives": [c.name for c in log.collectives]}
