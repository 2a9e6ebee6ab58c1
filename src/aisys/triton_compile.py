"""What Triton's compiler makes of a kernel for an NVIDIA GPU, computed on a machine with no GPU.

A Triton kernel names blocks of elements; the compiler decides which thread holds
which element (the *layout*), how wide each load is, and where shared memory and
barriers go. `compile_for_gpu` runs Triton's own compiler for a GPU generation
(compute capability 9.0, the H100, by default) and returns its intermediate forms:
TTIR (the program as written), TTGIR (the same with layouts) and PTX, which
`aisys.ptx.sass` and `aisys.ptx.resource_usage` take further.

The compiler runs in a child process: with TRITON_INTERPRET=1 (how Triton runs on a
CPU) `triton.jit` builds interpreted functions, which cannot be compiled, and that
switch is read once, when triton is imported. The child is started at the first call
and serves every later one (one JSON line in, one out): importing triton (and torch,
for a kernel imported from a module) and hashing Triton's own library for its cache
key took about a second per kernel when each call started a child of its own.
"""

import atexit
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import types
from dataclasses import dataclass

from ._validate import positive_int

# Runs in the child: compile each job read from stdin (one JSON line) and answer one JSON line on stdout, the
# kernel's forms or the error's traceback. A kernel written to a file is loaded as a module of its own; one imported
# by name is imported again when its file has changed since.
_CHILD = r"""
import importlib, importlib.util, json, os, sys, tempfile, traceback
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

answer = os.fdopen(os.dup(1), "w")  # the answers' own descriptor: what the compiler prints, from Python or from
os.dup2(2, 1)                          # its C++ (file descriptor 1), goes to stderr and cannot mix with them
sys.stdout = sys.stderr
loaded = {}  # module name -> modification time of its file when imported


def kernel_of(job, folder):
    kernel = None
    if job["module"]:
        try:
            kernel = importlib.import_module(job["module"])
            mtime = os.stat(kernel.__file__).st_mtime
            if loaded.setdefault(job["module"], mtime) != mtime:
                kernel, loaded[job["module"]] = importlib.reload(kernel), mtime
            for part in job["qualname"].split("."):
                kernel = getattr(kernel, part)
        except (ImportError, AttributeError, OSError, TypeError):
            kernel = None
    if kernel is None:  # triton.jit reads the source from a file, so the kernel's source is written to one
        source_file = os.path.join(folder, "kernel_source.py")
        with open(source_file, "w") as file:
            file.write(job["source"])
        spec = importlib.util.spec_from_file_location(f"kernel_source_{os.path.basename(folder)}", source_file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kernel = getattr(module, job["name"])
    while not isinstance(kernel, JITFunction):  # autotune and heuristics wrap the jit function
        kernel = kernel.fn
    return kernel


def compile_one(job):
    # a folder of the job's own for the kernel's source and Triton's cache (Triton reads TRITON_CACHE_DIR at each
    # compile): every compile is cold, and nothing is left behind however the process ends between jobs
    with tempfile.TemporaryDirectory(prefix="aisys-triton-") as folder:
        os.environ["TRITON_CACHE_DIR"] = folder
        divisible = [["tt.divisibility", 16]]
        source = ASTSource(fn=kernel_of(job, folder), signature=job["signature"],
                           constexprs={(i,): v for i, v in job["constexprs"]},
                           attrs={(i,): divisible for i in job["divisible"]})
        compiled = triton.compile(source, target=GPUTarget("cuda", job["cc"], 32),
                                  options={"num_warps": job["num_warps"], "num_stages": job["num_stages"]})
        return {"ttir": compiled.asm["ttir"], "ttgir": compiled.asm["ttgir"], "ptx": compiled.asm["ptx"],
                "shared": compiled.metadata.shared}


for line in sys.stdin:  # until the parent closes stdin, or ends and the pipe closes with it
    try:
        reply = {"forms": compile_one(json.loads(line))}
    except BaseException:
        reply = {"error": traceback.format_exc()}
    answer.write(json.dumps(reply) + "\n")
    answer.flush()
"""


class _Compiler:
    """The child process that compiles, started at the first call and again when the environment it would get
    changes or it died; one call at a time. It ends when its stdin closes, however this process ends."""

    def __init__(self):
        self.lock = threading.Lock()
        self.process = self.environment = self.log = None

    def compile(self, job: dict, environment: dict) -> dict:
        # pytest names the test in hand in the environment: no reason to start another compiler
        environment = {k: v for k, v in environment.items() if k != "PYTEST_CURRENT_TEST"}
        with self.lock:
            if self.process is None or self.process.poll() is not None or environment != self.environment:
                self._start(environment)
            try:
                self.process.stdin.write(json.dumps(job) + "\n")
                self.process.stdin.flush()
                line = self.process.stdout.readline()
            except OSError:  # the child died while reading the job
                line = ""
            if not line:
                self.log.seek(0)
                stderr = self.log.read()
                self.stop()
                return {"error": f"the compiler's process ended (exit code {self.process.returncode}):\n{stderr}"}
            return json.loads(line)

    def _start(self, environment: dict) -> None:
        self.stop()
        self.log = tempfile.TemporaryFile("w+")
        self.environment = environment
        self.process = subprocess.Popen([sys.executable, "-c", _CHILD], text=True, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.log, env=environment)

    def stop(self) -> None:
        """End the child: its stdin closes, and it finishes the job in hand and exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()
        self.environment = self.log = None


_COMPILER = _Compiler()
atexit.register(_COMPILER.stop)


@dataclass(frozen=True)
class Compiled:
    """One kernel compiled for one GPU generation, with one set of constants and options."""

    name: str
    ttir: str  # Triton IR: operations on whole blocks, no threads yet
    ttgir: str  # Triton GPU IR: every block carries a layout that spreads it over threads
    ptx: str
    arch: str  # the PTX target, e.g. 'sm_90a'
    num_warps: int
    shared_bytes: int  # shared memory per program (thread block), requested at launch: ptxas -v does not see it

    def layouts(self) -> dict:
        """The TTGIR's layouts by name, e.g. {'#blocked': 'sizePerThread = [4], threadsPerWarp = [32], ...'}."""
        return dict(re.findall(r"^(#\w+) = #ttg\.\w+<\{(.*)\}>", self.ttgir, re.M))


def _python_function(kernel) -> types.FunctionType:
    """The Python function under a triton.jit kernel, compiled or interpreted, autotuned or not."""
    function, seen = kernel, 0
    while not isinstance(function, types.FunctionType) and hasattr(function, "fn") and seen < 8:
        function, seen = function.fn, seen + 1
    if not isinstance(function, types.FunctionType) or kernel is function:
        raise TypeError(f"kernel must be a function decorated with @triton.jit, got {kernel!r}")
    return function


def _importable(function) -> bool:
    """Whether the child may import the kernel by name (not when it was defined in a notebook or a script)."""
    module = sys.modules.get(function.__module__)
    return (function.__module__ != "__main__" and "<locals>" not in function.__qualname__
            and getattr(module, "__file__", None) is not None)


def readable(ir: str) -> str:
    """TTIR or TTGIR without the source locations that follow every operation."""
    location = r'\s*loc\((?:"[^"]*"\(#\w*\)|#\w*|unknown|"[^"]*":\d+:\d+)\)'
    lines = (re.sub(location, "", line) for line in ir.splitlines() if not line.startswith("#loc"))
    return "\n".join(lines).strip() + "\n"


def _specialise(name: str, value) -> tuple:
    """Triton's type for one launch argument and whether it is divisible by 16, as a launch decides them."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    if not (isinstance(value, (bool, int, float)) or hasattr(value, "data_ptr")):
        raise TypeError(f"argument {name} must be a torch tensor, an int, a float or a bool, got "
                        f"{type(value).__name__}")
    kind, attribute = native_specialize_impl(BaseBackend, value, False, True, True)[:2]
    return kind, attribute == "D"


def compile_for_gpu(kernel, *args, num_warps: int = 4, num_stages: int = 3, cc: tuple = (9, 0),
                    **kwargs) -> Compiled:
    """Compile a `@triton.jit` kernel as the launch `kernel[grid](*args, **kwargs, num_warps=...)`
    would on an NVIDIA GPU of compute capability `cc` (9.0: the H100), with no GPU needed.

    The arguments are those of a launch: torch tensors (on any device; only their dtype and
    alignment matter), numbers, and the `tl.constexpr` values. Like a launch, this
    specialises the kernel on them: integers equal to 1 become constants, and pointers aligned
    to 16 bytes and integers divisible by 16 are marked so, which decides how wide the loads
    are. A kernel defined in a notebook is compiled from its source and may use only `triton`
    and `tl`; one defined in a module is imported by name.
    """
    import triton.language as tl

    function = _python_function(kernel)
    parameters = inspect.signature(function).parameters
    names = list(parameters)
    if len(args) > len(names):
        raise TypeError(f"{function.__name__} takes {len(names)} arguments, got {len(args)} positional ones")
    values = dict(zip(names, args))
    unknown = set(kwargs) - set(names)
    twice = set(kwargs) & set(values)
    if unknown or twice:
        raise TypeError(f"{function.__name__}: unknown argument(s) {sorted(unknown) or 'none'}, "
                        f"given twice: {sorted(twice) or 'none'}; its arguments are {', '.join(names)}")
    values.update(kwargs)
    for name, parameter in parameters.items():
        if name not in values and parameter.default is not inspect.Parameter.empty:
            values[name] = parameter.default
    missing = [name for name in names if name not in values]
    if missing:
        raise TypeError(f"{function.__name__} needs argument(s) {', '.join(missing)}")
    num_warps = positive_int("num_warps", num_warps)
    if num_warps & (num_warps - 1) or num_warps > 32:
        raise ValueError(f"num_warps must be a power of two from 1 to 32, got {num_warps}")
    num_stages = positive_int("num_stages", num_stages)
    if not (isinstance(cc, tuple) and len(cc) == 2 and all(isinstance(v, int) and v >= 0 for v in cc)):
        raise ValueError(f"cc must be a (major, minor) tuple of integers such as (9, 0), got {cc!r}")

    signature, constexprs, divisible = {}, [], []
    for index, name in enumerate(names):
        annotation = parameters[name].annotation
        if annotation is tl.constexpr or str(annotation).endswith("constexpr"):
            kind, value = "constexpr", values[name]
        else:
            kind, aligned = _specialise(name, values[name])
            value = values[name]
            if aligned:
                divisible.append(index)
        signature[name] = kind
        if kind == "constexpr":
            if not isinstance(value, (bool, int, float, str)):
                raise TypeError(f"constant {name} must be a bool, int, float or str, got {type(value).__name__}")
            constexprs.append([index, value])

    job = {
        "name": function.__name__,
        "module": function.__module__ if _importable(function) else None,
        "qualname": function.__qualname__,
        "signature": signature, "constexprs": constexprs, "divisible": divisible,
        "num_warps": num_warps, "num_stages": num_stages, "cc": cc[0] * 10 + cc[1],
    }
    source = "import triton\nimport triton.language as tl\n\n\n" + textwrap.dedent(inspect.getsource(function))
    environment = {**os.environ, "TRITON_INTERPRET": "0",
                   "PYTHONPATH": os.pathsep.join(path for path in sys.path if path),
                   "TRITON_DEFAULT_FP_FUSION": os.environ.get("TRITON_DEFAULT_FP_FUSION", "1")}
    done = _COMPILER.compile({**job, "source": source}, environment)
    if "error" in done:
        raise RuntimeError(f"Triton could not compile {function.__name__}:\n{done['error'].strip()[-3000:]}")
    forms = done["forms"]
    return Compiled(name=function.__name__, ttir=forms["ttir"], ttgir=forms["ttgir"], ptx=forms["ptx"],
                    arch=re.search(r"^\.target\s+(\w+)", forms["ptx"], re.M)[1], num_warps=num_warps,
                    shared_bytes=int(forms["shared"]))
