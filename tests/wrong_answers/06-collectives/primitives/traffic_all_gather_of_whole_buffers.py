"""Counts the all-gather as moving whole buffers of nbytes, not the reduced blocks of nbytes / p it gathers."""

FAILS = ["composition_traffic"]


def composition_traffic(world_size, nbytes):
    p, n = world_size, nbytes
    server = [(p - 1) * n if rank == 0 else n for rank in range(p)]
    ring = [(p - 1) * n / p + (p - 1) * n] * p
    return {"reduce_then_broadcast": {"sent": server, "received": list(server)},
            "reduce_scatter_then_all_gather": {"sent": ring, "received": list(ring)}}
