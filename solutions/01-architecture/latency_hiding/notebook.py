# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: hiding latency: Little's law, occupancy, Amdahl and Gustafson
#
# **You will learn** to compute how many bytes a memory system must have in flight to deliver its bandwidth
# (Little's law: Little 1961), how many warps, or independent loads per warp, a GPU needs for that (Volkov,
# "Better performance at lower occupancy", GTC 2010), how the registers a kernel uses cap the bandwidth it can
# reach, and how much a parallel machine can speed up a program at all: Amdahl (1967), Gustafson (1988), and the
# serial fraction a measured speed-up reveals (Karp and Flatt, CACM 1990).
#
# **The conventions, all of them:**
# - **Units.** Latencies are in **nanoseconds** (`latency_ns`), as microbenchmarks report them; bandwidths are in
#   **bytes per second** (`bandwidth`: an H100 SXM5's HBM is `3.35e12`); sizes in **bytes**. Convert the latency to
#   seconds before multiplying by a bandwidth.
# - **A warp load** is one load instruction executed by the 32 threads of a warp; `bytes_per_warp_load` is what it
#   moves (a coalesced float32 load: 32 x 4 = 128 bytes; a float4 load: 32 x 16 = 512).
# - **ILP** (`ilp`, an integer >= 1) is the number of independent loads each warp issues before it waits for the
#   first: a warp has `ilp * bytes_per_warp_load` bytes in flight.
# - **Warp counts are Python `int`s, rounded UP** (`math.ceil`): a fraction of a warp does not exist, and rounding
#   down falls short of the target. The checks avoid cases whose exact count lies within rounding error of a whole
#   number.
# - **Floats** are compared with a relative tolerance of `1e-9` (the order of your multiplications may differ
#   from the reference's).
# - **Errors**: raise `ValueError` whose message names the argument (e.g. `"latency_ns must be > 0, got 0"`) for
#   `latency_ns <= 0` (in `bytes_in_flight`, `warps_needed`, `bandwidth_reached`), `fraction` outside `[0, 1]`
#   (`warps_needed`), `serial_fraction` outside `[0, 1]` (`amdahl_speedup`, `gustafson_speedup`) and `p < 2`
#   (`karp_flatt`). Other arguments are valid in every case the checks use.
#
# In each function, replace the solution with your code, then run the check cell below it. Visible checks use a
# few fixed cases (H100-like and A100-like figures); hidden checks run the same functions on many more. When
# your work is graded, only the aisys modules in this exercise's `student_may_import` can be imported; the
# reference answers cannot.

# %%
import math

from aisys_grader import checker

check = checker("01-architecture/latency_hiding", globals())

# %% [markdown]
# ## 1. Little's law: bytes in flight
#
# A load takes `latency` seconds from request to data; a memory system delivers `bandwidth` bytes per second only
# if, at every moment, `latency * bandwidth` bytes are requested and not yet delivered. A Xeon reading DRAM at
# 131 GB/s with 89 ns of latency needs 11,659 bytes in flight; one core computing `y = a * x + b` on doubles has
# 16 bytes in flight per element, 0.14% of that.

# %% tags=["solution"]
def bytes_in_flight(latency_ns: float, bandwidth: float) -> float:
    """Bytes that must be in flight to sustain `bandwidth` (bytes/s) with a latency of `latency_ns` nanoseconds."""
    ### BEGIN SOLUTION
    if latency_ns <= 0:
        raise ValueError(f"latency_ns must be > 0, got {latency_ns!r}")
    return latency_ns * 1e-9 * bandwidth
    ### END SOLUTION


# %% tags=["check"]
check("bytes_in_flight")
### BEGIN HIDDEN TESTS
check("bytes_in_flight", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Warps needed per SM
#
# The chip's bytes in flight are shared by its `sms` SMs. Return the fewest warps per SM that keep
# `fraction * bytes_in_flight(latency_ns, bandwidth)` bytes in flight over the whole chip, each warp with `ilp`
# loads of `bytes_per_warp_load` bytes outstanding: an `int`, rounded up. `fraction = 0` needs 0 warps.

# %% tags=["solution"]
def warps_needed(latency_ns: float, bandwidth: float, sms: int, bytes_per_warp_load: int, ilp: int = 1,
                 fraction: float = 1.0) -> int:
    """Warps per SM that reach `fraction` of `bandwidth`: more ILP, fewer warps."""
    ### BEGIN SOLUTION
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    per_sm = fraction * bytes_in_flight(latency_ns, bandwidth) / sms
    return math.ceil(per_sm / (bytes_per_warp_load * ilp))
    ### END SOLUTION


# %% tags=["check"]
check("warps_needed")
### BEGIN HIDDEN TESTS
check("warps_needed", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The same target reached two ways: with `ilp` independent loads per warp, each warp carries `ilp` times the
# bytes, so the count of warps falls by that factor (rounded up). This check calls your `warps_needed` for ILP 1,
# 2, 4 and 8 and asks that the counts never grow, that they reach the target, and that one warp fewer would not.

# %% tags=["check"]
check("more_ilp_fewer_warps")
### BEGIN HIDDEN TESTS
check("more_ilp_fewer_warps", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Bandwidth reached
#
# Little's law the other way: with `warps_per_sm` warps on each of `sms` SMs, each with `ilp` loads of
# `bytes_per_warp_load` bytes outstanding, the memory delivers bytes in flight / latency, in bytes per second,
# but never more than its peak `bandwidth`.

# %% tags=["solution"]
def bandwidth_reached(latency_ns: float, bandwidth: float, sms: int, warps_per_sm: int, bytes_per_warp_load: int,
                      ilp: int = 1) -> float:
    """Bytes per second delivered when the SMs keep this many loads in flight, at most the peak."""
    ### BEGIN SOLUTION
    if latency_ns <= 0:
        raise ValueError(f"latency_ns must be > 0, got {latency_ns!r}")
    return min(bandwidth, sms * warps_per_sm * ilp * bytes_per_warp_load / (latency_ns * 1e-9))
    ### END SOLUTION


# %% tags=["check"]
check("bandwidth_reached")
### BEGIN HIDDEN TESTS
check("bandwidth_reached", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Occupancy: the warps registers allow
#
# An SM holds only the warps it has registers for. On an H100 and on an A100 (the same limits) an SM has 65,536
# 32-bit registers in **4 sub-partitions** of 16,384 each (a warp lives in one), at most 64 resident warps (2,048
# threads) and at most 32 resident blocks. Registers go to a warp in units of 256: a warp of threads using `r`
# registers each takes `ceil(32 * r / 256) * 256`. For blocks of `threads_per_block` threads (a multiple of 32 in
# [32, 1024]) using `registers_per_thread` registers each (in [1, 255]), no shared memory:
#
# - warps per block `w = threads_per_block // 32`;
# - blocks allowed by registers: if `registers_per_warp * ceil(w / 4) * 4 > 65536`, none; else
#   `(16384 // registers_per_warp) * 4 // w`;
# - blocks allowed by threads: `64 // w`; by the block limit: 32;
# - resident blocks: the least of the three. Return the resident **warps** (`int`): blocks times `w`.
#
# (These are the rules of the CUDA Occupancy Calculator, `cuda_occupancy.h`, for compute capabilities 8.0 and
# 9.0; chapter 2's occupancy page works through them.)

# %% tags=["solution"]
def resident_warps(threads_per_block: int, registers_per_thread: int) -> int:
    """Warps resident on one H100 (or A100) SM at once: registers, threads and the block limit decide."""
    ### BEGIN SOLUTION
    warps = threads_per_block // 32
    registers_per_warp = math.ceil(32 * registers_per_thread / 256) * 256
    if registers_per_warp * math.ceil(warps / 4) * 4 > 65536:
        by_registers = 0
    else:
        by_registers = (16384 // registers_per_warp) * 4 // warps
    blocks = min(by_registers, 64 // warps, 32)
    return blocks * warps
    ### END SOLUTION


# %% tags=["check"]
check("resident_warps")
### BEGIN HIDDEN TESTS
check("resident_warps", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. The bandwidth registers allow
#
# Put the two together: the bandwidth reached when every one of `sms` SMs holds the warps `resident_warps`
# allows, each with `ilp` loads of `bytes_per_warp_load` bytes outstanding. A kernel that spends many registers
# per thread runs fewer warps, and reaches less bandwidth unless ILP makes up for it.

# %% tags=["solution"]
def bandwidth_at_registers(latency_ns: float, bandwidth: float, sms: int, threads_per_block: int,
                           registers_per_thread: int, bytes_per_warp_load: int, ilp: int = 1) -> float:
    """Bytes per second reached with the warps the registers leave room for."""
    ### BEGIN SOLUTION
    warps = resident_warps(threads_per_block, registers_per_thread)
    return bandwidth_reached(latency_ns, bandwidth, sms, warps, bytes_per_warp_load, ilp)
    ### END SOLUTION


# %% tags=["check"]
check("bandwidth_at_registers")
### BEGIN HIDDEN TESTS
check("bandwidth_at_registers", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# This check sweeps the registers per thread and calls your `bandwidth_at_registers`, `resident_warps` and
# `bandwidth_reached`: the bandwidth must never grow as registers do, and must be what the resident warps give.

# %% tags=["check"]
check("registers_cap_bandwidth")
### BEGIN HIDDEN TESTS
check("registers_cap_bandwidth", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Amdahl and Gustafson
#
# A program takes time 1 on one processor, a fraction `serial_fraction` = s of it serial, the rest spread
# perfectly over `p` processors (an `int` >= 1). **Amdahl** (fixed problem): speed-up `1 / (s + (1 - s) / p)`,
# never above `1 / s`. **Gustafson** (the problem grows with p; s is the serial share of the time *on p
# processors*): one processor would take `s + p (1 - s)` times as long, the scaled speed-up.

# %% tags=["solution"]
def amdahl_speedup(serial_fraction: float, p: int) -> float:
    """Speed-up of a fixed problem on p processors."""
    ### BEGIN SOLUTION
    if not 0 <= serial_fraction <= 1:
        raise ValueError(f"serial_fraction must be in [0, 1], got {serial_fraction!r}")
    return 1 / (serial_fraction + (1 - serial_fraction) / p)
    ### END SOLUTION


def gustafson_speedup(serial_fraction: float, p: int) -> float:
    """Scaled speed-up of a problem grown to fill p processors."""
    ### BEGIN SOLUTION
    if not 0 <= serial_fraction <= 1:
        raise ValueError(f"serial_fraction must be in [0, 1], got {serial_fraction!r}")
    return serial_fraction + p * (1 - serial_fraction)
    ### END SOLUTION


# %% tags=["check"]
check("amdahl_speedup")
### BEGIN HIDDEN TESTS
check("amdahl_speedup", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("gustafson_speedup")
### BEGIN HIDDEN TESTS
check("gustafson_speedup", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 7. The serial fraction a measurement reveals (Karp-Flatt)
#
# Given a speed-up `speedup` measured on `p` >= 2 processors, return the serial fraction e for which Amdahl's law
# gives exactly that speed-up: solve `speedup = 1 / (e + (1 - e) / p)` for e,
# `e = (1/speedup - 1/p) / (1 - 1/p)`. (Measured at two processor counts: if e stays put, serial work limits the
# program; if it grows with p, parallel overhead does. A super-linear speed-up gives a negative e.)

# %% tags=["solution"]
def karp_flatt(speedup: float, p: int) -> float:
    """The experimentally determined serial fraction of a speed-up measured on p processors."""
    ### BEGIN SOLUTION
    if p < 2:
        raise ValueError(f"p must be >= 2, got {p!r}")
    return (1 / speedup - 1 / p) / (1 - 1 / p)
    ### END SOLUTION


# %% tags=["check"]
check("karp_flatt")
### BEGIN HIDDEN TESTS
check("karp_flatt", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 8. Refusing nonsense
#
# The check calls your functions with the invalid arguments listed at the top through this helper, which returns
# the error's type and message (or `None` when the call returns).

# %%
def refusal(called: str, **arguments):
    """[type name, message] of what the function named `called` raises on `arguments`, or None if it returns."""
    try:
        globals()[called](**arguments)
    except NotImplementedError:
        raise
    except Exception as error:  # any error is reported, and judged by the check
        return [type(error).__name__, str(error)]
    return None


# %% tags=["check"]
check("refusals")
### BEGIN HIDDEN TESTS
check("refusals", hidden=True)
### END HIDDEN TESTS
