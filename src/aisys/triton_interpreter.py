"""What aisys adds to Triton's interpreter (TRITON_INTERPRET=1, on a CPU): bounds-checked memory, counted launches.

The interpreter turns a block of pointers into addresses and reads or writes them unchecked. A store without a mask
writes past the end of its tensor into whatever lies there: silently, or it corrupts the heap and the process dies
(a GPU reports an illegal memory access, or writes into a neighbouring allocation without a word). `install()` makes
every load, store and atomic of a launch check first that each address its mask lets through lies inside one of the
tensors passed to that launch (within the elements the tensor's shape and strides reach), and raise IndexError
naming the kernel's line otherwise, before any memory is touched. `aisys.tensors` installs it wherever Triton runs in
its interpreter, so every exercise's notebook and grading kernel has it; compiled for a GPU nothing changes.

`launches()` records what each launch inside it did, as the checks of an algorithm's shape count it: its programs,
the loads and the elements they read (in all, and by the argument whose tensor holds them), the stores, the
`tl.dot`s and their multiply-adds, the atomics. The grader
counts in its clean room (`interpreting()`), where the student's code cannot reach the counts.
"""

import contextlib
import linecache
import os
import sys
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass
class Launch:
    """One launch of a kernel in the interpreter: what its programs did, summed over them."""

    kernel: str
    grid: tuple
    programs: int
    loads: int = 0  # tl.load calls (one per program and step of a loop)
    loaded: int = 0  # elements those loads read: the lanes their masks let through
    widest_load: int = 0  # the most lanes of one tl.load: the block a program holds at once
    loaded_from: dict = field(default_factory=dict)  # argument name -> the elements loads read from its tensor
    stores: int = 0
    stored: int = 0
    dots: int = 0  # tl.dot calls
    dot_macs: int = 0  # their multiply-adds, M x N x K each
    atomics: int = 0
    tensors: list = field(default_factory=list, repr=False)  # (argument, first byte, end byte, description)

    def to_plain(self) -> dict:
        report = asdict(self)
        del report["tensors"]
        report["grid"] = list(self.grid)
        return report


_running: Launch | None = None
_patched: set[frozenset] = set()  # the triton.language modules Triton has patched in the launch running, as sets
_recorders: list[list] = []
_installed = False


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@contextlib.contextmanager
def launches():
    """`with launches() as done:` then `done` lists a Launch for every kernel launched inside, in order."""
    done: list[Launch] = []
    _recorders.append(done)
    try:
        yield done
    finally:
        _recorders.remove(done)


@contextlib.contextmanager
def interpreting():
    """Inside, `triton.jit` makes kernels that run in the interpreter, bounds-checked and counted, even where Triton
    is otherwise compiled for a GPU (the grader's clean room: aisys_grader.cleanroom); tensors on a GPU are copied
    to the CPU and back for each launch, as the interpreter does."""
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"  # triton reads it at each triton.jit
    install()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before


def install() -> None:
    """Bounds-check and count every launch of Triton's interpreter from now on (see the module's docstring); nothing
    where Triton is compiled for a GPU. Installing twice is installing once."""
    global _installed
    if _installed or not interpreted():
        return
    import triton.language as tl
    from triton.runtime import interpreter

    builder, executor = interpreter.InterpreterBuilder, interpreter.GridExecutor
    patch_lang = interpreter._patch_lang
    load, store, rmw, cas, dot = (builder.create_masked_load, builder.create_masked_store, builder.create_atomic_rmw,
                                  builder.create_atomic_cas, builder.create_dot)
    init_args, run = executor._init_args_hst, executor.__call__

    # *rest, **named: the arguments that differ between Triton's versions, passed on as they come (tensor
    # descriptors' loads and stores name cache_policy)
    def create_masked_load(self, ptrs, mask, *rest, **named):
        lanes = _checked("load", ptrs, mask)
        if _running is not None:
            _running.loads += 1
            _running.loaded += lanes
            _running.widest_load = max(_running.widest_load, ptrs.data.size)
            for name, count in _by_argument(ptrs, mask).items():
                _running.loaded_from[name] = _running.loaded_from.get(name, 0) + count
        return load(self, ptrs, mask, *rest, **named)

    def create_masked_store(self, ptrs, value, mask, *rest, **named):
        lanes = _checked("store", ptrs, mask)
        if _running is not None:
            _running.stores += 1
            _running.stored += lanes
        return store(self, ptrs, value, mask, *rest, **named)

    def create_atomic_rmw(self, op, ptr, val, mask, *rest):
        _checked("atomic", ptr, mask)
        if _running is not None:
            _running.atomics += 1
        return rmw(self, op, ptr, val, mask, *rest)

    def create_atomic_cas(self, ptr, *rest):
        _checked("atomic", ptr, None)
        if _running is not None:
            _running.atomics += 1
        return cas(self, ptr, *rest)

    def create_dot(self, a, b, *rest):
        if _running is not None:
            _running.dots += 1
            _running.dot_macs += int(np.prod(a.data.shape)) * int(b.data.shape[-1])
        return dot(self, a, b, *rest)

    def _init_args_hst(self, args_dev, kwargs):
        args, kwargs_hst = init_args(self, args_dev, kwargs)
        named = [*zip(self.arg_names, args), *kwargs_hst.items()]
        _running.tensors = [extent for name, value in named for extent in _extents(name, value, interpreter)]
        return args, kwargs_hst

    def __call__(self, *args, **kwargs):
        global _running
        grid = self.grid
        shown = tuple(grid) if isinstance(grid, (tuple, list)) else ()
        _running = Launch(self.fn.__name__, shown, int(np.prod(shown)) if shown else 0)
        _patched.clear()
        try:
            run(self, *args, **kwargs)
        except interpreter.InterpreterError as error:
            cause = error
            while cause is not None and not getattr(cause, "out_of_bounds", False):
                cause = cause.__cause__
            if cause is None:
                raise
            raise IndexError(str(cause)) from None  # the student's mistake, said plainly: no interpreter wrapping
        finally:
            done, _running = _running, None
        for recorder in _recorders:
            recorder.append(done)

    def _patch_lang(fn):
        """What Triton swaps into triton.language for one launch, undone after it. Triton does it again at each call
        of a @triton.jit function inside the kernel (tl.zeros, tl.sum: a few ms each, a third of a small kernel's
        time); where the modules that function sees were patched already in this launch, that is done already."""
        langs = [value for value in fn.__globals__.values() if value is tl or value is tl.core]
        key = frozenset(map(id, langs))
        in_place = not any(tl.core.is_builtin(lang.program_id) for lang in langs)  # the interpreter's, not Triton's
        if _running is not None and key in _patched and in_place:
            return interpreter._LangPatchScope()  # nothing to undo
        scope = patch_lang(fn)
        scope.set_attr(tl.tensor, "__index__", _scalar_index)
        if _running is not None:
            _patched.add(key)
        return scope

    for name, patched in [("create_masked_load", create_masked_load), ("create_masked_store", create_masked_store),
                          ("create_atomic_rmw", create_atomic_rmw), ("create_atomic_cas", create_atomic_cas),
                          ("create_dot", create_dot)]:
        setattr(builder, name, patched)
    executor._init_args_hst, executor.__call__ = _init_args_hst, __call__
    interpreter._patch_lang = _patch_lang
    _installed = True


def _scalar_index(tensor) -> int:
    """A scalar of the interpreter as an index (`range(start, T)` in a kernel). The interpreter holds a scalar as a
    one-element array of shape (1,); Triton 3.6 converts it with int(array), which NumPy 2.4 refuses for arrays of
    more than 0 dimensions (Triton 3.9 squeezes first, as here)."""
    return int(tensor.handle.data.squeeze())


def _extents(name, value, interpreter):
    """(argument, first byte, end byte, description) of each tensor in a launch's argument `value`."""
    if isinstance(value, tuple):
        return [extent for item in value for extent in _extents(name, item, interpreter)]
    if isinstance(value, getattr(interpreter, "TensorDescriptor", ())):
        value = value.base
    if not hasattr(value, "data_ptr"):
        return []
    tensor = getattr(value, "base", value)  # a triton.reinterpret TensorWrapper holds its tensor as .base
    reach = 1 + sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride()))
    size = tensor.element_size() * (reach if tensor.numel() else 0)
    dtype = str(tensor.dtype).removeprefix("torch.")
    what = f"{tensor.numel()} {dtype} element{'' if tensor.numel() == 1 else 's'}"
    return [(name, tensor.data_ptr(), tensor.data_ptr() + size, what)]


def _by_argument(ptrs, mask) -> dict[str, int]:
    """The lanes `mask` lets through, by the argument whose tensor their addresses lie in."""
    addresses = (ptrs.data if mask is None else ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)]).ravel()
    counts = {}
    for name, start, end, _ in _running.tensors:
        inside = int(((addresses >= start) & (addresses < end)).sum())
        if inside:
            counts[name] = counts.get(name, 0) + inside
    return counts


def _checked(access: str, ptrs, mask) -> int:
    """The number of lanes `mask` lets through; IndexError (marked out_of_bounds) if any of their addresses lies
    outside every tensor of the launch running."""
    addresses = ptrs.data if mask is None else ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)]
    addresses = addresses.ravel()
    if _running is None or not addresses.size:
        return addresses.size
    width = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
    inside = np.zeros(addresses.size, dtype=bool)
    for _, start, end, _ in _running.tensors:
        inside |= (addresses >= start) & (addresses + width <= end)
    if inside.all():
        return addresses.size
    masked = mask is not None and not mask.data.all()  # tl.load without a mask passes one of all lanes
    lanes = f"{(~inside).sum()} of its {ptrs.data.size} lanes" + (" that its mask lets through" if masked else "")
    error = IndexError(_message(access, addresses[~inside], width, lanes))
    error.out_of_bounds = True
    raise error


def _message(access: str, outside: np.ndarray, width: int, lanes: str) -> str:
    """Where the kernel went out of bounds, which tensor it overran, and what to do."""
    first = int(outside.min())
    below = [t for t in _running.tensors if t[1] <= first]
    if below:
        name, start, end, what = max(below, key=lambda t: t[1])
        past = (first - end) // width + 1
        where = (f"{'just' if past == 1 else f'{past} elements'} past the end of `{name}` ({what})" if first >= end
                 else f"inside `{name}` but not on one of its elements")
    else:
        where = "before every tensor passed to the launch"
    verb = {"load": "reads", "store": "writes", "atomic": "updates"}[access]
    from triton.runtime import interpreter

    program = ", ".join(str(int(i)) for i in interpreter.interpreter_builder.grid_idx)
    return (f"{_running.kernel} (program {program}) {verb} outside the tensors passed to it{_line()}: {lanes} "
            f"fall outside them, the first {where}. Mask every lane that can fall past the end (mask=offsets < n): "
            "on a GPU it would read or overwrite other memory, or crash. The interpreter stopped before the access.")


def _line() -> str:
    """' at line N of <file> (`source`)': the innermost frame of the kernel's code (not Triton's, not this file's)."""
    frame = sys._getframe(1)
    triton_dir = os.path.dirname(sys.modules["triton"].__file__)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(triton_dir) or filename == __file__):
            break
        frame = frame.f_back
    if frame is None:
        return ""
    filename, number = frame.f_code.co_filename, frame.f_lineno
    source = " ".join(linecache.getline(filename, number).split())
    place = os.path.basename(filename) if os.path.isfile(filename) else "its cell"  # a cell has no file of its own
    return f", in `{frame.f_code.co_name}` at line {number} of {place}" + (f" (`{source}`)" if source else "")

