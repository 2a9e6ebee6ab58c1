"""Calls a kernel exactly at the ridge point memory-bound (it reaches peak compute there)."""

FAILS = ["bound"]


def bound(peak_flops, bandwidth, intensity):
    return "memory" if intensity <= peak_flops / bandwidth else "compute"
