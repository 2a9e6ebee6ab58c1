"""Counts p-1 messages for the ring all-reduce, forgetting that the all-gather after the reduce-scatter takes p-1 more."""

FAILS = ["predicted_time", "crossover"]

_correct_predicted_time = predicted_time  # noqa: F821


def predicted_time(collective, algorithm, nbytes, world_size, alpha, beta):
    seconds = _correct_predicted_time(collective, algorithm, nbytes, world_size, alpha, beta)
    if (collective, algorithm) == ("all_reduce", "ring"):
        seconds -= (world_size - 1) * alpha  # (p-1) α instead of 2(p-1) α
    return seconds
