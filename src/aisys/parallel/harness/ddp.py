"""The trusted driver of the DDP exercise: a tiny model trained on each rank around a student's ddp_attach/ddp_finish.

    value = train(student, tokens, targets, seed=1, steps=3, cap_bytes=400, lr=0.1)

Every rank builds the same model from `seed` (float64, on the device its data arrived on: CPU
under gloo, its GPU under NCCL), trains it on its own shard of each batch with the student's
`ddp_attach(params, cap_bytes)` before the first step and `ddp_finish(state)` after each
backward, and takes the SGD steps itself. Before each step every trainable parameter's `.grad` is
zeroed in place (a tensor, never None: the ranks' dialect cannot assign `.grad`), so a parameter
the forward does not use still has a `.grad`, of zeros, and no hook call. The model has what DDP must get right:

    params (registration order)      used in the forward
    0  embed     (vocab, dim)        x = embed[tokens]           tied: also listed as 7
    1  unused    (dim,)              never                        no gradient, ever
    2  frozen    (dim, dim)          x @ frozen                   requires_grad=False
    3  w1 (dim, hidden), 4 b1        h = gelu(x @ w1 + b1)
    5  w2 (hidden, dim), 6 b2        y = h @ w2 + b2 + x
    7  embed (the same tensor)       logits = y @ embed.T

and the loss is the mean cross-entropy over the rank's shard. The harness records with
aisys.collectives.traffic, collectives allowed: each all-reduce as it is posted, and its own
mark "grad" (with the parameter's index, its first listing) from a post-accumulate-grad hook
registered BEFORE the student's, so a mark precedes whatever the student's hook posts. With
`delay_rank`, that rank sleeps `delay` seconds between its forward and its backward, and every
rank times its own backward: a rank that blocks in a hook waiting for an all-reduce waits for
the late rank.

This module imports no reference and holds no state between calls.
"""

import time

import torch

from aisys.collectives import traffic

NAMES = ("embed", "unused", "frozen", "w1", "b1", "w2", "b2", "embed (tied output projection)")


def build_model(seed: int, vocab: int, dim: int, hidden: int, device="cpu") -> list[torch.Tensor]:
    """The parameters in registration order, the tied embedding listed twice (first and last), float64."""
    generator = torch.Generator().manual_seed(int(seed))

    def parameter(*shape, trainable=True):
        value = (torch.randn(*shape, generator=generator, dtype=torch.float64) * 0.5).to(device)
        return value.requires_grad_(trainable)

    embed = parameter(vocab, dim)
    unused = parameter(dim)
    frozen = parameter(dim, dim, trainable=False)
    w1, b1 = parameter(dim, hidden), parameter(hidden)
    w2, b2 = parameter(hidden, dim), parameter(dim)
    return [embed, unused, frozen, w1, b1, w2, b2, embed]


def loss(params: list[torch.Tensor], tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the model over these tokens (`unused` takes no part)."""
    embed, _unused, frozen, w1, b1, w2, b2, output = params
    x = embed[tokens] @ frozen
    h = torch.nn.functional.gelu(x @ w1 + b1)
    y = h @ w2 + b2 + x
    return torch.nn.functional.cross_entropy(y @ output.T, targets)


def distinct(params: list[torch.Tensor]) -> list[int]:
    """Indices of the distinct tensors, each at its first listing."""
    first = []
    for i, param in enumerate(params):
        if not any(param is params[j] for j in first):
            first.append(i)
    return first


def sgd_step(params: list[torch.Tensor], lr: float) -> None:
    """p -= lr * p.grad for each distinct trainable parameter; one without a gradient stays as it is."""
    with torch.no_grad():
        for i in distinct(params):
            if params[i].requires_grad and params[i].grad is not None:
                params[i].sub_(lr * params[i].grad)


def zero_grad(params: list[torch.Tensor]) -> None:
    """Every trainable parameter's .grad a tensor of zeros, as optimizer.zero_grad(set_to_none=False) leaves it."""
    for i in distinct(params):
        if params[i].requires_grad:
            if params[i].grad is None:
                params[i].grad = torch.zeros_like(params[i])
            else:
                params[i].grad.zero_()


def train_single(seed: int, vocab: int, dim: int, hidden: int, tokens, targets, steps: int, lr: float):
    """The expected weights: the same model trained in one process on each whole batch."""
    params = build_model(seed, vocab, dim, hidden)
    for step in range(steps):
        zero_grad(params)
        loss(params, torch.as_tensor(tokens[step]), torch.as_tensor(targets[step])).backward()
        sgd_step(params, lr)
    return [params[i].detach().numpy().copy() for i in distinct(params)]


def train(student, tokens, targets, seed: int, vocab: int, dim: int, hidden: int, cap_bytes: int, lr: float,
          delay_rank: int = -1, delay: float = 0.0) -> dict:
    """On one rank: train on this rank's shards tokens[step], targets[step] (each (steps, n)) with the student's
    DDP; return the final weights (each distinct tensor, registration order), each step's timeline and the
    seconds each backward took."""
    import torch.distributed as dist

    device = tokens.device
    params = build_model(seed, vocab, dim, hidden, device)
    with traffic.record(allow_collectives=True) as log:
        for i in distinct(params):
            if params[i].requires_grad:
                params[i].register_post_accumulate_grad_hook(
                    lambda _param, index=i: log.mark("grad", param=index))
        state = student["ddp_attach"](params, cap_bytes)
        backward_seconds = []
        for step in range(tokens.shape[0]):
            zero_grad(params)
            log.mark("step", step=step)
            value = loss(params, tokens[step], targets[step])
            if dist.get_rank() == delay_rank:
                time.sleep(delay)
            start = time.perf_counter()
            value.backward()
            backward_seconds.append(time.perf_counter() - start)
            log.mark("backward_done")
            student["ddp_finish"](state)
            log.mark("finished")
            sgd_step(params, lr)
    steps = []
    for entry in log.timeline():
        plain = entry.to_plain()
        if plain.get("label") == "step":
            steps.append([])
        elif "label" in plain:
            steps[-1].append({"kind": plain["label"], **plain["info"]})
        else:
            steps[-1].append({"kind": plain.get("name") or plain.get("kind"), "nbytes": plain["nbytes"],
                              "dtype": plain["dtype"]})
    weights = [params[i].detach().cpu().numpy().copy() for i in distinct(params)]
    return {"weights": weights, "steps": steps, "backward_seconds": backward_seconds}
