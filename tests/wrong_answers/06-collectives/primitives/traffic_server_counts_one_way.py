"""Counts only the reduce on the parameter server's link (p - 1 buffers in), forgetting the sum it sends back."""

FAILS = ["composition_traffic"]


def composition_traffic(world_size, nbytes):
    p, n = world_size, nbytes
    ring = [2 * (p - 1) * n / p] * p
    return {"reduce_then_broadcast": {"sent": [0 if rank == 0 else n for rank in range(p)],
                                      "received": [(p - 1) * n if rank == 0 else 0 for rank in range(p)]},
            "reduce_scatter_then_all_gather": {"sent": ring, "received": list(ring)}}
