"""Returns the lines' meeting point even when it is at a negative size, where one algorithm always wins."""

FAILS = ["crossover"]


def crossover(collective, algorithm_a, algorithm_b, world_size, alpha, beta):
    latency_a = predicted_time(collective, algorithm_a, 1, world_size, 1, 0)  # noqa: F821
    volume_a = predicted_time(collective, algorithm_a, 1, world_size, 0, 1)  # noqa: F821
    latency_b = predicted_time(collective, algorithm_b, 1, world_size, 1, 0)  # noqa: F821
    volume_b = predicted_time(collective, algorithm_b, 1, world_size, 0, 1)  # noqa: F821
    if volume_a == volume_b:
        return None
    return (latency_a - latency_b) * alpha / ((volume_b - volume_a) * beta)
