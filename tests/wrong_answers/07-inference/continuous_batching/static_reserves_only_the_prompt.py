"""Static batching that reserves blocks for the prompt only, so its batches take more than the output can fit in."""

FAILS = ['simulate_static']


def simulate_static(requests: list, num_blocks: int, block_size: int, max_batch: int, step_time) -> list:
    """Serve `requests` in batches that run until their longest member is done, worst-case blocks reserved."""
    a, b = step_time
    pending = sorted(requests, key=lambda r: r["arrival"])  # sorted() is stable: ties keep the list's order
    done = {}
    clock = 0.0
    while pending:
        if pending[0]["arrival"] > clock:
            clock = pending[0]["arrival"]  # idle: jump to the next arrival
        batch, free = [], num_blocks
        while pending and pending[0]["arrival"] <= clock and len(batch) < max_batch:
            worst = blocks_for(pending[0]["prompt_len"], block_size)  # noqa: F821
            if worst > free:
                break
            free -= worst
            batch.append(pending.pop(0))
        clock += a + b * sum(r["prompt_len"] for r in batch)  # the prefill: every member's first token
        for r in batch:
            done[r["id"]] = {"id": r["id"], "first_token": clock, "finish": clock, "preemptions": 0}
        for generated in range(1, max(r["output_len"] for r in batch)):
            clock += a + b * sum(r["output_len"] > generated for r in batch)  # the members still decoding
            for r in batch:
                if r["output_len"] > generated:
                    done[r["id"]]["finish"] = clock
    return [done[r["id"]] for r in requests]
