"""The trusted driver of the ZeRO exercise (05-parallel-training/zero): training steps around a student's functions.

On each rank, `train` builds a tiny two-layer model in float64 from a seed (the same on every
rank), takes the rank's rows of a batch made from the same seed, and trains it for a few steps
with the student's `init_state`, `gather_parameters`, `reduce_gradients` and `adamw_step`, called
where a ZeRO training loop calls them. It records the collectives each step posts, with its own
marks between them ("forward" after the forward pass, "backward" after the backward pass,
"reduced" after the gradients were reduced), what the rank holds at those points (the size of
every tensor in its state; the gradient elements it keeps once they are reduced). The local
gradients come from torch.autograd.grad and are handed to `reduce_gradients`, then dropped:
whatever of them the rank keeps is in its state, and returns
the rank's final state and the first step's reduced gradient shard as plain data.

The model and the batch are public (`parameters`, `batch`, `loss`): the checks build the same
ones to compute what unsharded AdamW gives. Nothing here imports the reference.
"""

import math
import warnings

import torch

from aisys.collectives import traffic
from aisys.collectives.launch import rank_device


def shapes(dims) -> list[list[int]]:
    """The parameters of the model with layer widths dims = (inputs, hidden, outputs): W1, b1, W2, b2."""
    d_in, d_hidden, d_out = (int(d) for d in dims)
    return [[d_in, d_hidden], [d_hidden], [d_hidden, d_out], [d_out]]


def parameters(seed: int, dims, device="cpu") -> list:
    """The model's initial parameters in float64, the same for a seed on every process (uneven sizes: a 7x5
    matrix, 5, 5x3 and 3 for dims (7, 5, 3))."""
    generator = torch.Generator().manual_seed(int(seed))
    return [(torch.randn(shape, generator=generator, dtype=torch.float64) / math.sqrt(shape[0])).to(device)
            for shape in shapes(dims)]


def batch(seed: int, dims, rows: int, device="cpu") -> tuple:
    """The whole batch (x, y) for a seed: `rows` inputs and targets, float64."""
    generator = torch.Generator().manual_seed(int(seed) + 1)
    d_in, _, d_out = (int(d) for d in dims)
    x = torch.randn(rows, d_in, generator=generator, dtype=torch.float64)
    y = torch.randn(rows, d_out, generator=generator, dtype=torch.float64)
    return x.to(device), y.to(device)


def loss(weights: list, x, y):
    """Mean squared error of tanh(x W1 + b1) W2 + b2 against y: a mean over the rows given."""
    w1, b1, w2, b2 = weights
    return ((torch.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2).mean()


def _sizes(state) -> dict:
    """Elements every tensor the state holds keeps alive, by key: its storage's, not its view's (a slice of a full
    vector keeps all of it); a list or tuple of tensors counts as the sum of them."""
    if not isinstance(state, dict):
        raise TypeError(f"the state must be a dict, got {type(state).__name__}")
    sizes = {}
    for key, value in state.items():
        tensors = [value] if isinstance(value, torch.Tensor) else (
            [v for v in value if isinstance(v, torch.Tensor)] if isinstance(value, (list, tuple)) else [])
        if tensors:
            sizes[str(key)] = int(sum(t.untyped_storage().nbytes() // t.element_size() for t in tensors))
    return sizes


def _kept(definitions) -> dict:
    """The fingerprint of the storage the student's code can keep between calls (cleanroom.Definitions.kept); a
    plain dict of functions, as a notebook's own demo passes, has none to take: {}."""
    return definitions.kept() if hasattr(definitions, "kept") else {}


def _kept_outside(definitions, before: dict) -> list[str]:
    """What the student's code changed of its own storage (module-level values, default arguments) since `before`:
    what a rank keeps outside its state."""
    after = _kept(definitions)
    return sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))


def _entry(entry) -> dict:
    """A recorded collective as its name and size, a message as its kind and size, a mark as its label."""
    if isinstance(entry, traffic.Collective):
        return {"name": entry.name, "numel": entry.numel}
    if isinstance(entry, traffic.Message):
        return {"name": entry.kind, "numel": entry.numel}
    return {"mark": entry.label}


def _plain(tensor) -> list:
    return tensor.detach().double().cpu().reshape(-1).tolist()


def train(definitions, stage: int, seed: int, dims, rows: int, steps: int, hyper: dict) -> dict:
    """Train for `steps` steps with the student's ZeRO functions at `stage` on this rank's rows of the batch.

    `hyper` holds AdamW's lr, beta1, beta2, eps and weight_decay. Returns "shard", "params" (the
    full parameters the state keeps, flattened; None where it keeps none), "exp_avg",
    "exp_avg_sq" (flattened), "grad_shard" (the first step's reduced gradient, state["grad"]),
    "sizes" (per point, the elements the state's tensors keep alive), "kept_outside" (what the student's code changed
    of storage of its own outside the state: module-level values, default arguments), "grad_held" (after each
    step's reduction,
    the elements of the state's tensors whose key says "grad": the gradients it keeps), and
    "steps" (per step, the timeline: collectives with name and numel, and the marks).
    """
    import torch.distributed as dist

    device = rank_device(dist.get_backend())
    rank, p = dist.get_rank(), dist.get_world_size()
    x, y = batch(seed, dims, rows, device)
    per_rank = rows // p
    x, y = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
    betas = (float(hyper["beta1"]), float(hyper["beta2"]))
    init_state, gather = definitions["init_state"], definitions["gather_parameters"]
    reduce_gradients, adamw_step = definitions["reduce_gradients"], definitions["adamw_step"]

    before = _kept(definitions)
    state = init_state(parameters(seed, dims, device), int(stage))
    result = {"sizes": {"init": _sizes(state)}, "grad_held": [], "steps": [], "grad_shard": None, "kept_outside": []}
    for step in range(int(steps)):
        with traffic.record(allow_collectives=True) as log, warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch 2.13 renames all_gather_into_tensor and the like
            weights = gather(state)
            with torch.no_grad():
                loss(weights, x, y)
            log.mark("forward")
            result["sizes"][f"forward {step + 1}"] = _sizes(state)
            if int(stage) == 3:  # the full parameters are freed after the forward pass and gathered again
                weights = None
                weights = gather(state)
            grads = list(torch.autograd.grad(loss(weights, x, y), weights))
            log.mark("backward")
            reduce_gradients(state, grads)  # the rank keeps of them only what its state holds
            grads = weights = None
            log.mark("reduced")
            result["sizes"][f"reduced {step + 1}"] = _sizes(state)
            result["grad_held"].append(sum(count for key, count in _sizes(state).items() if "grad" in key))
            grad = state.get("grad")
            if step == 0 and isinstance(grad, torch.Tensor):
                result["grad_shard"] = _plain(grad)
            adamw_step(state, float(hyper["lr"]), betas, float(hyper["eps"]), float(hyper["weight_decay"]))
        result["sizes"][f"step {step + 1}"] = _sizes(state)
        result["kept_outside"] += [f"step {step + 1}: {path}" for path in _kept_outside(definitions, before)]
        result["steps"].append([_entry(e) for e in log.timeline()])
    params = state.get("params")
    result["params"] = (_plain(torch.cat([t.reshape(-1) for t in params])) if isinstance(params, (list, tuple))
                        and params and all(isinstance(t, torch.Tensor) for t in params) else None)
    for key in ("shard", "exp_avg", "exp_avg_sq"):
        value = state.get(key)
        result[key] = _plain(value) if isinstance(value, torch.Tensor) else None
    return result
