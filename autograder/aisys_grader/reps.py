"""Timed repetitions of a function on inputs made on the device: the loop a speed check times (see speed.py).

`run(function, plan)` runs in the student's process, where the grader reaches it through the bridge
(`bridge.reply(..., harness="reps")`), and in the grader's own, with functions of its own: a no-op (the
loop's own cost) and the hardware's limit. It is copied into the grading kernel beside bridge.py, and
imports nothing of aisys_grader: whatever it reports is untrusted, and speed.py says why that is enough.

The plan, plain data from the grader:

    reps     the most repetitions to run
    seconds  a time budget: no repetition starts once it is spent (at least one runs)
    seeds    one seed per repetition, for its inputs; `weights` seeds the digests' weights
    inputs   [[shape, dtype, mean, std], ...]: each repetition's tensors, normal(mean, std), made on the
             device from that repetition's seed, and passed first, in order ("fp32", "fp16" or "bf16")
    args, kwargs  the function's other arguments, after the tensors
    arrays   "torch" or "cupy": what the function takes (CuPy arrays share the tensors' memory)
    device   "cuda" (a test's "cpu")

Each repetition's inputs are made one repetition ahead, in a buffer of their own, so that between a
repetition's inputs being written and its function reading them come the previous repetition's call,
the next inputs and the previous digest: far more than the L2 cache holds, which then holds none of
them. The function's results (a tensor, a CuPy array, a number, or a list or tuple of them) stay on the
device; each is digested there as its dot product with weights of its size, normal(0, 1) from the
`weights` seed. The reply: the results' shapes and one digest per result per repetition run.
"""

import contextlib
import sys
import time

import numpy as np

DTYPES = ("fp32", "fp16", "bf16")
AHEAD = 4  # repetitions the host may queue ahead of the device before it looks at the clock


def run(function, plan: dict) -> dict:
    """Call `function` on fresh inputs, repetition after repetition; the results' shapes and digests."""
    import torch

    device = plan.get("device", "cuda")
    specs = [(tuple(shape), dtype, float(mean), float(std)) for shape, dtype, mean, std in plan["inputs"]]
    generator = torch.Generator(device)
    buffers = [[torch.empty(shape, dtype=_torch_dtype(dtype), device=device) for shape, dtype, _, _ in specs]
               for _ in range(2)]
    seeds, reps = plan["seeds"], min(int(plan["reps"]), len(plan["seeds"]))
    weights, digests, shapes, done = [], [], None, []
    start = time.perf_counter()
    with _results_kept_on_device():
        make(buffers[0], specs, seeds[0], generator)
        previous = None
        for r in range(reps):
            if r + 1 < reps:
                make(buffers[(r + 1) % 2], specs, seeds[r + 1], generator)
            if previous is not None:
                digests.append(_digest(previous, weights, plan["weights"], device))
            arguments = [_as(plan.get("arrays", "torch"), t) for t in buffers[r % 2]]
            previous = _results(function(*arguments, *plan.get("args", ()), **plan.get("kwargs", {})), device)
            shapes = shapes or [list(t.shape) for t in previous]
            done.append(_marker(device))
            if len(done) > AHEAD:
                done[-1 - AHEAD].synchronize()  # the device is at most AHEAD repetitions behind the host
            if time.perf_counter() - start > float(plan["seconds"]):
                break
        digests.append(_digest(previous, weights, plan["weights"], device))
        values = torch.stack(digests).double().cpu().numpy()  # waits for the device
    return {"shapes": shapes, "digests": values}


def make(buffers, specs, seed: int, generator) -> None:
    """Fill the buffers with one repetition's inputs: normal(mean, std), from `seed`."""
    generator.manual_seed(int(seed))
    for buffer, (_, _, mean, std) in zip(buffers, specs):
        buffer.normal_(mean, std, generator=generator)


def inputs(specs: list, seed: int, device: str = "cuda") -> list:
    """A repetition's inputs as `run` makes them (the grader's reference starts from these)."""
    import torch

    specs = [(tuple(shape), dtype, float(mean), float(std)) for shape, dtype, mean, std in specs]
    made = [torch.empty(shape, dtype=_torch_dtype(dtype), device=device) for shape, dtype, _, _ in specs]
    make(made, specs, seed, torch.Generator(device))
    return made


def weights_for(numel: int, seed: int, index: int, device: str = "cuda"):
    """The digest weights of result `index`, of `numel` elements (float32), as `run` makes them."""
    import torch

    generator = torch.Generator(device)
    generator.manual_seed(int(seed) + index)  # one stream per result
    return torch.empty(numel, dtype=torch.float32, device=device).normal_(generator=generator)


def _digest(results, weights: list, seed: int, device: str):
    """One digest per result: the dot product of its elements (as float32) with its weights, on the device."""
    import torch

    if not weights:
        weights.extend(weights_for(t.numel(), seed, i, device) for i, t in enumerate(results))
    if len(results) != len(weights) or any(t.numel() != w.numel() for t, w in zip(results, weights)):
        raise ValueError("the results changed shape from one repetition to the next")
    return torch.stack([torch.dot(t.reshape(-1).float(), w) for t, w in zip(results, weights)])


def _results(value, device: str) -> list:
    """The function's result as a list of tensors on the device, without copying any to the host."""
    import torch

    items = list(value) if isinstance(value, (list, tuple)) else [value]
    out = []
    for item in items:
        if isinstance(item, torch.Tensor):
            out.append(item.detach())
        elif hasattr(item, "__cuda_array_interface__"):  # a CuPy array: the same memory, as a tensor
            out.append(torch.as_tensor(item, device=device))
        elif isinstance(item, (int, float, np.ndarray, np.number)):  # on the host: the function chose to wait
            out.append(torch.as_tensor(np.asarray(item, dtype=np.float64), device=device))
        else:
            raise TypeError(f"a result is a {type(item).__name__}; expected tensors, arrays or numbers")
    return out


def _as(arrays: str, tensor):
    if arrays == "cupy":
        import cupy

        return cupy.asarray(tensor)  # shares the tensor's memory
    return tensor


def _marker(device: str):
    """Something to wait on: an event recorded after this repetition's work, or nothing to wait for on a CPU."""
    import torch

    if device == "cpu":
        return _Done()
    event = torch.cuda.Event()
    event.record()
    return event


def _torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise ValueError(f"an input's dtype must be one of {DTYPES}, got {name!r}")
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def _results_kept_on_device():
    """Where the notebook uses aisys.tensors, its to_numpy leaves results on the device meanwhile."""
    tensors = sys.modules.get("aisys.tensors")
    kept = getattr(tensors, "results_on_device", None)
    return kept() if kept is not None else contextlib.nullcontext()


class _Done:
    def synchronize(self):
        pass
