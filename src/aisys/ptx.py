"""PTX and SASS of a kernel written in numba's `cuda` dialect, compiled on the CPU with no GPU.

numba turns the Python kernel into PTX (NVIDIA's virtual instruction set) through NVVM;
`ptxas` assembles PTX into SASS (the machine code of one GPU generation) and reports the
registers and shared memory each thread block needs; `cuobjdump` prints the SASS. The
three tools come from NVIDIA's wheels (nvidia-nvvm and nvidia-cuda-nvrtc for numba,
nvidia-cuda-nvcc for ptxas, nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm for the
disassembly), found in the installed packages or else on the PATH.
"""

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import types
from pathlib import Path

# Where NVIDIA's wheels put their executables: CUDA 13 wheels share nvidia/cu13/bin,
# CUDA 12 wheels use one folder per package.
_WHEEL_BIN_FOLDERS = ("cu13/bin", "cuda_nvcc/bin", "cuda_cuobjdump/bin", "cuda_nvdisasm/bin")
_WHEEL_OF = {"ptxas": "nvidia-cuda-nvcc", "cuobjdump": "nvidia-cuda-cuobjdump", "nvdisasm": "nvidia-cuda-nvdisasm"}


def tool(name: str) -> Path:
    """The path of one of NVIDIA's command-line tools (`ptxas`, `cuobjdump` or `nvdisasm`)."""
    if name not in _WHEEL_OF:
        raise ValueError(f"name must be one of {', '.join(map(repr, _WHEEL_OF))}; got {name!r}")
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for folder in _WHEEL_BIN_FOLDERS:
            path = Path(root) / folder / name
            if path.is_file() and os.access(path, os.X_OK):
                return path
    found = shutil.which(name)
    if found:
        return Path(found)
    raise FileNotFoundError(f"{name} was not found in the installed NVIDIA wheels or on the PATH; "
                            f"install it with: pip install {_WHEEL_OF[name]}")


def _run(command: list, what: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PATH": os.pathsep.join(
        [str(Path(command[0]).parent), os.environ.get("PATH", "")])})  # cuobjdump runs nvdisasm from its own folder
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({Path(command[0]).name} exit code {done.returncode}):\n"
                           f"{(done.stderr or done.stdout).strip()}")
    return done.stdout + done.stderr


def _numba_function(kernel_function):
    """The Python function numba compiles: an aisys.simt kernel's own copy for numba-cuda, or the function."""
    from aisys.simt.dialect import DeviceFunction, Kernel

    if isinstance(kernel_function, (Kernel, DeviceFunction)):
        return kernel_function.numba_function()
    function = getattr(kernel_function, "py_func", kernel_function)
    if not isinstance(function, types.FunctionType):
        raise TypeError(f"kernel_function must be a Python function or a cuda.jit kernel, got {kernel_function!r}")
    return function


@contextlib.contextmanager
def _target(cc: tuple, numba_cuda):
    """numba-cuda compiles a device function for the GPU it finds; with no GPU, for `cc`."""
    from numba.cuda import dispatcher

    if numba_cuda.is_available():
        yield
        return
    found = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = found


def ptx(kernel_function, signature, cc: tuple = (9, 0)) -> str:
    """The PTX that numba generates for `kernel_function` with argument types `signature`.

    `kernel_function` is a plain Python function or a kernel made by `cuda.jit` (numba's or
    `aisys.simt`'s); `signature` is a tuple of numba types, e.g. `(float32[:], float32[:], int32)`,
    or a string such as `"void(float32[:], float32[:], int32)"`; `cc` is the compute capability
    (major, minor) to target: (9, 0) is the H100 and H200, (8, 0) the A100.
    """
    if not (isinstance(signature, (tuple, str)) and signature):
        raise TypeError(f"signature must be a non-empty tuple of numba types or a signature string, got {signature!r}")
    if not (isinstance(cc, tuple) and len(cc) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                          for v in cc)):
        raise ValueError(f"cc must be a (major, minor) tuple of integers such as (9, 0), got {cc!r}")
    try:
        from numba import cuda as numba_cuda
    except ImportError as error:
        raise ImportError("ptx() needs numba with its CUDA target: pip install numba-cuda "
                          "nvidia-nvvm nvidia-cuda-nvrtc") from error
    with _target(cc, numba_cuda):
        text, _ = numba_cuda.compile_ptx(_numba_function(kernel_function), signature, cc=cc)
    return text


def _check_arch(arch) -> str:
    if not (isinstance(arch, str) and re.fullmatch(r"sm_\d+[af]?", arch)):
        raise ValueError(f"arch must name a GPU generation such as 'sm_90' (H100) or 'sm_80' (A100), got {arch!r}")
    return arch


def _check_ptx(ptx_text) -> str:
    if not isinstance(ptx_text, str) or (".entry" not in ptx_text and ".func" not in ptx_text):
        raise ValueError("ptx_text must be PTX source (a string with a .entry or .func), such as ptx() returns")
    return ptx_text


def _assemble(ptx_text: str, arch: str, folder: Path, verbose: bool = False) -> tuple[Path, str]:
    source, cubin = folder / "kernel.ptx", folder / "kernel.cubin"
    source.write_text(ptx_text)
    log = _run([str(tool("ptxas")), f"-arch={arch}", *(["-v"] if verbose else []), "-o", str(cubin), str(source)],
               "assembling the PTX with ptxas")
    return cubin, log


def sass(ptx_text: str, arch: str = "sm_90") -> str:
    """The SASS (machine code) that `ptxas` makes from `ptx_text` for GPU generation `arch`,
    as `cuobjdump -sass` prints it, without the instruction-encoding comments."""
    _check_ptx(ptx_text), _check_arch(arch)
    with tempfile.TemporaryDirectory(prefix="aisys-ptx-") as folder:
        cubin, _ = _assemble(ptx_text, arch, Path(folder))
        listing = _run([str(tool("cuobjdump")), "-sass", str(cubin)], "disassembling with cuobjdump")
    lines = [re.sub(r"\s*/\* 0x[0-9a-f]{16} \*/\s*$", "", line) for line in listing.splitlines()]
    return "\n".join(line for line in lines if line.strip()) + "\n"


_USAGE = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def resource_usage(ptx_text: str, arch: str = "sm_90") -> dict:
    """What one thread and one block of the kernel in `ptx_text` need, from `ptxas -v`:
    `registers` per thread, `shared_bytes` of static shared memory per block, `barriers`,
    `stack_bytes` of local-memory stack frame and `spill_stores`/`spill_loads` in bytes
    (registers that did not fit and went to local memory)."""
    _check_ptx(ptx_text), _check_arch(arch)
    with tempfile.TemporaryDirectory(prefix="aisys-ptx-") as folder:
        _, log = _assemble(ptx_text, arch, Path(folder), verbose=True)
    usage, frame = _USAGE.search(log), _FRAME.search(log)
    if usage is None:
        raise RuntimeError(f"ptxas -v printed no register count for the kernel:\n{log}")
    stack, stores, loads = (int(v) for v in frame.groups()) if frame else (0, 0, 0)
    return {"registers": int(usage[1]), "barriers": int(usage[2] or 0), "shared_bytes": int(usage[3] or 0),
            "stack_bytes": stack, "spill_stores": stores, "spill_loads": loads}
