"""Takes the higher of the two roofs, so every kernel seems to reach peak compute."""

FAILS = ["attainable_flops"]


def attainable_flops(peak_flops, bandwidth, intensity):
    return max(peak_flops, bandwidth * intensity)
