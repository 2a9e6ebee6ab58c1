"""Simulated memory: arrays whose every element access is bounds-checked and logged with its byte address.

A log record is (site, thread, kind, address, size): `thread` is the thread's
number within its block, `kind` one of the constants below. Global arrays get
256-byte-aligned addresses as cudaMalloc gives; shared arrays are laid out one
after the other from address 0 of their block's shared memory.
"""

import operator

import numpy as np

from .instrument import SITES

GLOBAL_LOAD, GLOBAL_STORE, SHARED_LOAD, SHARED_STORE, GLOBAL_ATOMIC, SHARED_ATOMIC = range(6)
SHARED_LIMIT = 48 * 1024  # bytes of static shared memory one block may declare (CUDA's limit without opt-in)


class KernelError(RuntimeError):
    """A kernel did something a GPU would fail on or a sanitizer would report, and the launch stopped."""


class state:
    """What the simulator is running now (one launch at a time, one thread at a time)."""

    thread = None  # the running Thread
    block = None  # the running Block
    launch = None  # the running Launch
    log: list = []  # the running block's access log


class Array:
    """An array a simulated kernel reads and writes: a numpy array plus where it lives."""

    __slots__ = ("array", "shape", "size", "ndim", "dtype", "itemsize", "base", "steps", "name", "shared")

    def __init__(self, array: np.ndarray, base: int, name: str, shared: bool):
        self.array, self.base, self.name, self.shared = array, base, name, shared
        self.shape, self.size, self.ndim, self.dtype = array.shape, array.size, array.ndim, array.dtype
        self.itemsize = array.itemsize
        self.steps = tuple(s // array.itemsize for s in array.strides)  # elements between neighbours, per axis

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"<{'shared' if self.shared else 'global'} array {self.name} {self.dtype} {self.shape}>"

    def _where(self, index, site: int, verb: str):
        """Element offset of `index` (after bounds checks) and the index as numpy takes it."""
        if type(index) is tuple:
            if len(index) != self.ndim:
                raise self._error(index, site, verb, f"{self.name} has {self.ndim} dimension(s), "
                                                     f"indexed with {len(index)}")
            offset, clean = 0, []
            for i, n, step in zip(index, self.shape, self.steps):
                if type(i) is not int:
                    i = self._integer(i, site)
                if not 0 <= i < n:
                    raise self._error(index, site, verb, f"{self.name} has shape {self.shape}")
                offset += i * step
                clean.append(i)
            return offset, tuple(clean)
        if self.ndim != 1:
            raise self._error(index, site, verb, f"{self.name} has shape {self.shape}: index it with {self.ndim} "
                                                 "numbers, like a[i, j]")
        if type(index) is not int:
            index = self._integer(index, site)
        if not 0 <= index < self.size:
            raise self._error(index, site, verb, f"{self.name} has shape {self.shape}")
        return index * self.steps[0], index

    def _integer(self, value, site: int) -> int:
        try:
            return operator.index(value)
        except TypeError:
            raise KernelError(f"{self._place(site)}: an index must be an integer, got {type(value).__name__} "
                              f"{value!r}") from None

    def load(self, index, site: int):
        offset, index = self._where(index, site, "read")
        t = state.thread
        state.log.append((site, t.number, SHARED_LOAD if self.shared else GLOBAL_LOAD,
                          self.base + offset * self.itemsize, self.itemsize))
        return self.array[index]

    def store(self, index, value, site: int):
        offset, index = self._where(index, site, "write")
        t = state.thread
        state.log.append((site, t.number, SHARED_STORE if self.shared else GLOBAL_STORE,
                          self.base + offset * self.itemsize, self.itemsize))
        self.array[index] = value

    def atomic(self, index, site: int, update):
        """Read-modify-write as one step (threads run one at a time here); returns the old value."""
        offset, index = self._where(index, site, "atomically update")
        t = state.thread
        state.log.append((site, t.number, SHARED_ATOMIC if self.shared else GLOBAL_ATOMIC,
                          self.base + offset * self.itemsize, self.itemsize))
        old = self.array[index]
        self.array[index] = update(old)
        return old

    def _place(self, site: int) -> str:
        s = SITES[site]
        return f"line {s.line} of kernel `{s.kernel}` (`{s.source}`)"

    def _error(self, index, site: int, verb: str, why: str) -> KernelError:
        t, b = state.thread, state.block
        return KernelError(f"out-of-bounds: {self._place(site)} tried to {verb} {self.name}[{_show(index)}]; "
                           f"{why}. Thread {t.index} of block {b.index}.")


def _show(index) -> str:
    return ", ".join(map(str, index)) if type(index) is tuple else str(index)


class DeviceArray:
    """What `cuda.to_device` and `cuda.device_array` return in the simulator: a copy in 'device memory'."""

    def __init__(self, array: np.ndarray):
        self._array = array

    shape = property(lambda self: self._array.shape)
    size = property(lambda self: self._array.size)
    ndim = property(lambda self: self._array.ndim)
    dtype = property(lambda self: self._array.dtype)

    def __len__(self):
        return len(self._array)

    def copy_to_host(self, ary=None, stream=0):
        if ary is None:
            return self._array.copy()
        ary[...] = self._array
        return ary

    def copy_to_device(self, ary, stream=0):
        self._array[...] = ary

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)

    def __repr__(self):
        return f"<simulated device array {self.dtype} {self.shape}>"


def as_dtype(dtype, what: str) -> np.dtype:
    """A numpy dtype from a numpy type, a dtype, a name, or a numba type such as numba.float32."""
    try:
        return np.dtype(dtype)
    except TypeError:
        try:
            return np.dtype(str(dtype))
        except TypeError:
            raise KernelError(f"{what}: dtype must be a number type such as np.float32 or numba.int32, "
                              f"got {dtype!r}") from None


def as_shape(shape, what: str) -> tuple:
    dims = shape if isinstance(shape, tuple) else (shape,)
    try:
        dims = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise KernelError(f"{what}: shape must be an integer or a tuple of integers, got {shape!r}") from None
    if not dims or any(d < 0 for d in dims):
        raise KernelError(f"{what}: shape must be sizes >= 0, got {shape!r}")
    return dims
