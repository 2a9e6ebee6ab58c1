"""Preempts the request admitted first (the one closest to done) instead of the most recently admitted."""

FAILS = ['continuous_with_preemption']


def simulate_continuous(requests: list, num_blocks: int, block_size: int, max_batch: int, step_time) -> list:
    """Serve `requests` with iteration-level scheduling: admit every step, preempt the newest when blocks run out."""
    a, b = step_time
    state = {r["id"]: {"request": r, "generated": 0, "cached": 0, "blocks": 0, "preemptions": 0,
                       "first_token": None, "finish": None} for r in requests}
    pending = sorted(requests, key=lambda r: r["arrival"])
    waiting, running = [], []  # ids; running in admission order
    free, clock = num_blocks, 0.0
    while pending or waiting or running:
        while pending and pending[0]["arrival"] <= clock:
            waiting.append(pending.pop(0)["id"])
        if not waiting and not running:
            clock = pending[0]["arrival"]
            continue
        decodes, preempted = [], False
        for rid in list(running):
            if rid not in running:  # preempted earlier in this loop
                continue
            s = state[rid]
            need = blocks_for(s["cached"] + 1, block_size) - s["blocks"]  # noqa: F821
            while need > free and rid in running:
                victim = state[running.pop(0)]  # the oldest
                if victim["request"]["id"] in decodes:  # it already had its block: drop its decode too
                    decodes.remove(victim["request"]["id"])
                free += victim["blocks"]
                victim["blocks"] = victim["cached"] = 0
                victim["preemptions"] += 1
                waiting.insert(0, victim["request"]["id"])
                preempted = True
            if rid in running:
                s["blocks"] += need
                free -= need
                decodes.append(rid)
        prefills = []
        while not preempted and waiting and len(running) < max_batch:
            s = state[waiting[0]]
            tokens = s["request"]["prompt_len"] + s["generated"]  # a preempted request recomputes its output
            need = blocks_for(tokens, block_size)  # noqa: F821
            if need > free:
                break
            running.append(waiting.pop(0))
            s["blocks"], free = need, free - need
            prefills.append((s, tokens))
        clock += a + b * (len(decodes) + sum(tokens for _, tokens in prefills))
        for s, tokens in [(state[rid], 1) for rid in decodes] + prefills:
            s["cached"] += tokens
            s["generated"] += 1
            if s["first_token"] is None:
                s["first_token"] = clock
            if s["generated"] == s["request"]["output_len"]:
                s["finish"] = clock
                running.remove(s["request"]["id"])
                free += s["blocks"]
    return [{"id": r["id"], "first_token": state[r["id"]]["first_token"], "finish": state[r["id"]]["finish"],
             "preemptions": state[r["id"]]["preemptions"]} for r in requests]
