"""Charges the ring all-reduce n β, as if the whole buffer crossed each link once, instead of 2(p-1)/p n β."""

FAILS = ["predicted_time", "crossover"]

_correct_predicted_time = predicted_time  # noqa: F821


def predicted_time(collective, algorithm, nbytes, world_size, alpha, beta):
    if (collective, algorithm) == ("all_reduce", "ring"):
        return 2 * (world_size - 1) * alpha + nbytes * beta
    return _correct_predicted_time(collective, algorithm, nbytes, world_size, alpha, beta)
