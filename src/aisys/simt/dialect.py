"""`cuda`: numba's CUDA dialect, run by the simulator on a CPU and by numba-cuda on an NVIDIA GPU.

Kernels are written once, against this object (`from aisys.simt import cuda`).
A launch goes to numba-cuda when a GPU is in use (see `aisys.device`) and no
`profile()` block asks for the simulator; then the kernel is compiled from the
same source with `cuda` standing for `numba.cuda` itself.
"""

import contextlib
import functools
import inspect
import operator
import sys
import types
from pathlib import Path

import numpy as np

from . import launch, scheduler
from .instrument import instrument
from .memory import Array, DeviceArray, KernelError, as_dtype, as_shape, state
from .report import Launches

_profiles: list[Launches] = []


@functools.cache
def _gpu() -> bool:
    """Whether launches go to numba-cuda: an NVIDIA GPU in use (see aisys.device) and numba-cuda installed."""
    from aisys import device

    if device.requested() == "cpu" or not any(Path("/dev").glob("nvidia[0-9]*")):
        return False  # decided without importing torch or numba, which take a second or more
    try:
        from numba import cuda as numba_cuda
    except ImportError:
        return False
    return numba_cuda.is_available() and device.current() == "cuda"


def backend() -> str:
    """'simulator' or 'numba-cuda': where a launch made now would run."""
    return "simulator" if _profiles or not _gpu() else "numba-cuda"


@contextlib.contextmanager
def profile():
    """Run the launches made inside the block in the simulator (even on a GPU machine) and collect their reports."""
    launches = Launches()
    _profiles.append(launches)
    try:
        yield launches
    finally:
        _profiles[:] = [p for p in _profiles if p is not launches]  # by identity: reports compare as lists


# The simulator's side of the dialect: what kernels call ------------------------------------------------

def _in_kernel(what: str):
    if state.thread is None:
        raise KernelError(f"cuda.{what} is only meaningful inside a kernel (a function decorated with @cuda.jit, "
                          "launched as kernel[blocks, threads](...))")
    return state.thread


class _Dim3:
    __slots__ = ("_of",)

    def __init__(self, of):
        self._of = of

    x = property(lambda self: self._of(0))
    y = property(lambda self: self._of(1))
    z = property(lambda self: self._of(2))


def _thread_axis(axis):
    t = _in_kernel("threadIdx")
    return (t.x, t.y, t.z)[axis]


def _block_axis(axis):
    _in_kernel("blockIdx")
    return state.block.index[axis]


def _block_dim(axis):
    _in_kernel("blockDim")
    return state.launch.block[axis]


def _grid_dim(axis):
    _in_kernel("gridDim")
    return state.launch.grid[axis]


def _check_ndim(ndim):
    if ndim not in (1, 2, 3):
        raise KernelError(f"cuda.grid / cuda.gridsize take 1, 2 or 3 dimensions, got {ndim!r}")


def _grid(ndim):
    _check_ndim(ndim)
    t, b, launch_ = _in_kernel("grid"), state.block.index, state.launch
    index = [b[a] * launch_.block[a] + (t.x, t.y, t.z)[a] for a in range(ndim)]
    return index[0] if ndim == 1 else tuple(index)


def _gridsize(ndim):
    _check_ndim(ndim)
    _in_kernel("gridsize")
    sizes = [state.launch.grid[a] * state.launch.block[a] for a in range(ndim)]
    return sizes[0] if ndim == 1 else tuple(sizes)


class _Shared:
    @staticmethod
    def array(shape, dtype):
        _in_kernel("shared.array")
        return scheduler.shared_array(sys._getframe(1), shape, dtype)


class _Local:
    @staticmethod
    def array(shape, dtype):
        _in_kernel("local.array")
        return scheduler.garbage(as_shape(shape, "cuda.local.array"), as_dtype(dtype, "cuda.local.array"))


class _Const:
    @staticmethod
    def array_like(ary):
        return ary


def _atomic(name, update):
    def operation(ary, idx, val):
        _in_kernel(f"atomic.{name}")
        if type(ary) is not Array:
            raise KernelError(f"cuda.atomic.{name}: the first argument must be a global or shared array, got "
                              f"{type(ary).__name__}")
        frame = sys._getframe(1)
        site = _site_of(frame)
        return ary.atomic(idx, site, lambda old: update(old, val))
    operation.__name__ = name
    return operation


def _site_of(frame) -> int:
    """A site number for an atomic call, registered once per place in the source."""
    from .instrument import SITES, Site

    key = (frame.f_code, frame.f_lasti)
    site = _atomic_sites.get(key)
    if site is None:
        import linecache
        SITES.append(Site(frame.f_code.co_name, frame.f_lineno, "atomic",
                          linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()))
        site = _atomic_sites[key] = len(SITES) - 1
    return site


_atomic_sites: dict = {}


class _Atomic:
    add = staticmethod(_atomic("add", operator.add))
    sub = staticmethod(_atomic("sub", operator.sub))
    max = staticmethod(_atomic("max", lambda old, v: max(old, v)))
    min = staticmethod(_atomic("min", lambda old, v: min(old, v)))
    exch = staticmethod(_atomic("exch", lambda old, v: v))
    and_ = staticmethod(_atomic("and_", operator.and_))
    or_ = staticmethod(_atomic("or_", operator.or_))
    xor = staticmethod(_atomic("xor", operator.xor))
    inc = staticmethod(_atomic("inc", lambda old, v: 0 if old >= v else old + 1))
    dec = staticmethod(_atomic("dec", lambda old, v: v if old == 0 or old > v else old - 1))

    @staticmethod
    def cas(ary, idx, old, val):
        _in_kernel("atomic.cas")
        return ary.atomic(idx, _site_of(sys._getframe(1)), lambda current: val if current == old else current)

    compare_and_swap = cas


def _collective(name):
    def call(mask, value, arg=None):
        _in_kernel(name)
        return scheduler.warp_collective(sys._getframe(1), name, mask, value, arg)
    call.__name__ = name
    return call


# Kernels and device functions --------------------------------------------------------------------------

def _helpers() -> dict:
    """The functions an instrumented kernel calls for each access and branch."""

    def load(a, index, site):
        return a.load(index, site) if type(a) is Array else a[index]

    def store(a, index, value, site):
        if type(a) is Array:
            a.store(index, value, site)
        else:
            a[index] = value

    def branch(condition, site):
        taken = bool(condition)
        state.block.branches.append((site, state.thread.number, taken))
        return taken

    def loop(iterable, site):
        branches, number = state.block.branches, state.thread.number
        for item in iterable:
            branches.append((site, number, 1))
            yield item
        branches.append((site, number, 0))

    return {"_aisys_ld": load, "_aisys_st": store, "_aisys_br": branch, "_aisys_loop": loop}


class _Compiled:
    """A Python function of the dialect, with its simulated and numba-cuda versions made when first needed."""

    def __init__(self, function, options: dict, signature=None):
        if not isinstance(function, types.FunctionType):
            raise TypeError(f"cuda.jit decorates a Python function, got {function!r}")
        self.function, self.options, self.signature = function, options, signature
        functools.update_wrapper(self, function)
        self._simulated = self._numba = None

    @property
    def simulated(self):
        if self._simulated is None:
            self._simulated = instrument(self.function, _helpers())
        return self._simulated

    def numba_function(self):
        """A copy of the function in which `cuda` is numba-cuda itself and device functions are compiled by it."""
        from numba import cuda as numba_cuda

        def for_numba(value):
            if value is cuda:
                return numba_cuda
            if isinstance(value, DeviceFunction) and value is not self:
                return value.numba()
            return value

        used = _names_used(self.function.__code__)
        names = {name: for_numba(value) if name in used else value
                 for name, value in self.function.__globals__.items()}
        cells = tuple(types.CellType(for_numba(c.cell_contents)) for c in self.function.__closure__ or ())
        return types.FunctionType(self.function.__code__, names, self.function.__name__,
                                  self.function.__defaults__, cells or None)


def _names_used(code: types.CodeType) -> set[str]:
    """Global names a function's code (nested functions included) refers to."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names_used(constant)
    return names


class DeviceFunction(_Compiled):
    """`@cuda.jit(device=True)`: a function kernels call."""

    def __call__(self, *args, **kwargs):
        if state.thread is None:
            raise KernelError(f"device function `{self.__name__}` can only be called from a kernel or another "
                              "device function")
        return self.simulated(*args, **kwargs)

    def numba(self):
        if self._numba is None:
            from numba import cuda as numba_cuda
            self._numba = numba_cuda.jit(device=True, **self.options)(self.numba_function())
        return self._numba


class Kernel(_Compiled):
    """`@cuda.jit`: a kernel, launched as kernel[blocks, threads_per_block](args...)."""

    def __getitem__(self, config):
        if not isinstance(config, tuple) or not 2 <= len(config) <= 4:
            raise KernelError(f"launch kernel `{self.__name__}` as {self.__name__}[blocks, threads_per_block](...), "
                              f"got [{config!r}]")
        grid, block = launch.configuration(*config[:2])
        return functools.partial(self._launch, grid, block, config[2:])

    def __call__(self, *args, **kwargs):
        raise KernelError(f"a kernel needs a launch configuration: {self.__name__}[blocks, threads_per_block]"
                          f"({', '.join(self.parameters)})")

    @property
    def parameters(self) -> list[str]:
        return list(inspect.signature(self.function).parameters)

    def numba(self):
        if self._numba is None:
            from numba import cuda as numba_cuda
            function = self.numba_function()
            if self.signature is not None:
                self._numba = numba_cuda.jit(self.signature, **self.options)(function)
            else:
                self._numba = numba_cuda.jit(**self.options)(function)
        return self._numba

    def _launch(self, grid, block, extra, *args):
        if backend() == "numba-cuda":
            self.numba()[(grid, block, *extra)](*args)
            return
        if len(args) != len(self.parameters):
            raise KernelError(f"kernel `{self.__name__}` takes {len(self.parameters)} arguments "
                              f"({', '.join(self.parameters)}), got {len(args)}")
        report = launch.run(self.__name__, self.simulated, self.parameters, grid, block, args)
        for launches in _profiles:
            launches.append(report)


# The object kernels and host code use ------------------------------------------------------------------

class Dialect:
    """numba.cuda's kernel-side names (simulated) and host-side names (simulated or numba-cuda's)."""

    threadIdx = _Dim3(_thread_axis)
    blockIdx = _Dim3(_block_axis)
    blockDim = _Dim3(_block_dim)
    gridDim = _Dim3(_grid_dim)
    warpsize = scheduler.WARP
    shared, local, const, atomic = _Shared(), _Local(), _Const(), _Atomic()
    grid = staticmethod(_grid)
    gridsize = staticmethod(_gridsize)
    shfl_sync = staticmethod(_collective("shfl_sync"))
    shfl_up_sync = staticmethod(_collective("shfl_up_sync"))
    shfl_down_sync = staticmethod(_collective("shfl_down_sync"))
    shfl_xor_sync = staticmethod(_collective("shfl_xor_sync"))
    all_sync = staticmethod(_collective("all_sync"))  # votes: (mask, predicate)
    any_sync = staticmethod(_collective("any_sync"))
    eq_sync = staticmethod(_collective("eq_sync"))
    ballot_sync = staticmethod(_collective("ballot_sync"))

    @property
    def laneid(self):
        return _in_kernel("laneid").lane

    @staticmethod
    def jit(function=None, device=False, **options):
        """@cuda.jit, @cuda.jit(device=True), @cuda.jit("void(float32[:])"), with numba's options."""
        signature = None
        if isinstance(function, (str, tuple, list)) or (function is not None and not callable(function)):
            signature, function = function, None
        make = (lambda f: DeviceFunction(f, options, signature)) if device else \
            (lambda f: Kernel(f, options, signature))
        return make(function) if function is not None else make

    @staticmethod
    def syncthreads():
        _in_kernel("syncthreads")
        scheduler.syncthreads(sys._getframe(1))

    @staticmethod
    def syncthreads_count(predicate):
        _in_kernel("syncthreads_count")
        return scheduler.syncthreads(sys._getframe(1), predicate)

    @staticmethod
    def syncthreads_and(predicate):
        _in_kernel("syncthreads_and")
        return int(scheduler.syncthreads(sys._getframe(1), predicate) == state.launch.threads_per_block)

    @staticmethod
    def syncthreads_or(predicate):
        _in_kernel("syncthreads_or")
        return int(scheduler.syncthreads(sys._getframe(1), predicate) > 0)

    @staticmethod
    def syncwarp(mask=0xFFFFFFFF):
        _in_kernel("syncwarp")
        scheduler.warp_collective(sys._getframe(1), "syncwarp", mask)

    @staticmethod
    def activemask():
        """The lanes of the caller's warp that exist. Threads run one after another here, not in lockstep, so
        lanes on the other side of a branch, or already returned, are not told apart."""
        t = _in_kernel("activemask")
        lanes = min(scheduler.WARP, state.launch.threads_per_block - t.warp * scheduler.WARP)
        return (1 << lanes) - 1

    @staticmethod
    def threadfence():
        _in_kernel("threadfence")  # one thread runs at a time here: memory is always consistent

    threadfence_block = threadfence_system = threadfence

    # host side: simulated, or numba-cuda's on a GPU
    def to_device(self, obj, stream=0, copy=True, to=None):
        if backend() == "numba-cuda":
            from numba import cuda as numba_cuda
            return numba_cuda.to_device(obj, stream=stream, copy=copy, to=to)
        if to is not None:
            to.copy_to_device(obj)
            return to
        return DeviceArray(np.array(obj, copy=True))

    def device_array(self, shape, dtype=np.float64, strides=None, order="C", stream=0):
        if backend() == "numba-cuda":
            from numba import cuda as numba_cuda
            return numba_cuda.device_array(shape, dtype=dtype, strides=strides, order=order, stream=stream)
        return DeviceArray(np.zeros(as_shape(shape, "cuda.device_array"), as_dtype(dtype, "cuda.device_array"),
                                    order=order))

    def device_array_like(self, ary, stream=0):
        return self.device_array(ary.shape, ary.dtype, stream=stream)

    def synchronize(self):
        if backend() == "numba-cuda":
            from numba import cuda as numba_cuda
            numba_cuda.synchronize()

    def is_available(self):
        return True

    def __getattr__(self, name):
        if backend() == "numba-cuda":
            from numba import cuda as numba_cuda
            return getattr(numba_cuda, name)
        raise AttributeError(f"cuda.{name} is not simulated by aisys.simt; the simulator supports: "
                             + ", ".join(n for n in dir(Dialect) if not n.startswith("_")))


cuda = Dialect()
