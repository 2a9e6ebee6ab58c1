"""Synchronising data-parallel workers: a parameter server's traffic against an all-reduce's, and when each worker
may start its next iteration under synchronous, stale-synchronous and asynchronous SGD.

    parameter_server_bytes(n, workers=8)          # each worker: n up and n down; the one server: 8n each way
    all_reduce_bytes(n, 8)                        # a ring: 2·7/8·n each way on every rank
    finish_times(durations, staleness=0)          # bulk synchronous: everyone waits for the slowest each step

Traffic counts one worker's gradient (or weights) as n bytes. With a parameter server (Li et al.,
"Scaling Distributed Machine Learning with the Parameter Server", OSDI 2014) each worker pushes
its gradient and pulls the new weights, n each way; the servers together take in workers·n per
step, so `servers` servers, each holding 1/servers of the parameters, carry workers·n/servers
each way on their links: with one server its link is the bottleneck, growing with the number of
workers. A ring all-reduce (aisys.collectives.cost) sends 2(p-1)/p·n each way on every rank,
whatever p.

Staleness follows Ho et al., "More Effective Distributed ML via a Stale Synchronous Parallel
Parameter Server", NeurIPS 2013: with staleness bound s, a worker may start iteration c only once
every worker has finished iteration c - s - 1 (its clock is at most s ahead of the slowest).
s = 0 is bulk-synchronous SGD (a barrier per step); s = infinity is asynchronous SGD, as in
Downpour SGD (Dean et al., "Large Scale Distributed Deep Networks", NeurIPS 2012), where nobody
waits and the gradients a worker applies were computed on weights up to any number of updates old.
"""

import math

import numpy as np

from .._validate import finite_array, nonnegative_number, positive_int
from ..collectives import cost


def parameter_server_bytes(n: float, workers: int, servers: int = 1) -> dict:
    """Bytes per step: each worker sends and receives n; each server's link carries workers·n/servers each way."""
    n = nonnegative_number("n", n)
    workers, servers = positive_int("workers", workers), positive_int("servers", servers)
    return {"worker_sends": n, "worker_receives": n, "server_receives": workers * n / servers,
            "server_sends": workers * n / servers}


def all_reduce_bytes(n: float, world_size: int) -> float:
    """Bytes each rank sends (and receives) per step in a ring all-reduce of n bytes: 2(p-1)/p·n."""
    n = nonnegative_number("n", n)
    return cost.terms("all_reduce", "ring", n, positive_int("world_size", world_size))[1] if n else 0.0


def finish_times(durations, staleness: float = 0) -> np.ndarray:
    """When each worker finishes each iteration, (workers, iterations), from durations[w, c], the seconds worker w
    computes iteration c. Worker w starts iteration c when it has finished c - 1 and every worker has finished
    c - staleness - 1 (staleness 0: synchronous; math.inf: asynchronous). Communication takes no time here."""
    durations = finite_array("durations", durations, ndim=2, nonempty=True, kinds="fiu")
    if (durations < 0).any():
        raise ValueError("durations must be >= 0")
    staleness = nonnegative_number("staleness", staleness)
    workers, iterations = durations.shape
    done = np.zeros((workers, iterations))
    for c in range(iterations):
        wait = c - staleness - 1  # the iteration every worker must have finished
        gate = done[:, int(wait)].max() if wait >= 0 and not math.isinf(staleness) else 0.0
        for w in range(workers):
            start = max(done[w, c - 1] if c else 0.0, gate)
            done[w, c] = start + durations[w, c]
    return done


def waiting_fraction(durations, staleness: float = 0) -> float:
    """The share of the workers' time spent blocked at the staleness gate rather than computing: the sum over
    workers of (when it finished its last iteration - its own compute time), over the sum of those finish times."""
    done = finish_times(durations, staleness)
    busy = np.asarray(durations, dtype=float).sum(axis=1)
    return float((done[:, -1] - busy).sum() / done[:, -1].sum())
