"""A SIMT simulator for kernels written in numba's CUDA dialect, with what a profiler and a sanitizer would say.

    from aisys.simt import cuda            # the dialect: simulated on a CPU, numba-cuda on a GPU
    from aisys import simt

    @cuda.jit
    def add(x, y, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] + y[i]

    with simt.profile() as launches:       # the simulator, even on a GPU; one report per launch
        add[4, 256](x, y, out)
    print(launches[-1])                    # coalescing, bank conflicts, divergence, races, barrier errors

Threads of a block run as greenlets that meet at barriers and warp collectives;
every array access and branch is logged and grouped by warp afterwards
(see `analysis`). Out-of-bounds accesses and errors inside a kernel raise
`KernelError`; races and barrier problems go into the report and a `SimtWarning`.
"""

from .dialect import backend, cuda, profile
from .instrument import SourceError
from .launch import SimtWarning
from .memory import KernelError
from .report import LaunchReport

__all__ = ["cuda", "profile", "backend", "KernelError", "SourceError", "SimtWarning", "LaunchReport"]
