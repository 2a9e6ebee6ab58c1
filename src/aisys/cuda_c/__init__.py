"""CUDA C kernels launched from Python through CuPy's RawKernel: GPU only, with what to say where there is none.

The kernels of this package are CUDA C source strings, compiled at run time by NVRTC
(through CuPy) and launched on tensors of the GPU. On a machine without a GPU,
`unavailable()` says why they cannot run; `ptx()` still compiles a source to PTX with
NVIDIA's compiler wheel, which needs no GPU, so a syntax error shows on a laptop too.
"""

import functools

from aisys import device

ARCH = "compute_90"  # PTX for Hopper (H100), as the book's other PTX listings


def cupy_problem() -> str | None:
    """Why CuPy cannot launch kernels here (not installed, or no usable GPU), or None when it can."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed: pip install -e '.[gpu]'"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # CuPy imports without a driver and fails on first use
        return f"CuPy cannot use a GPU here ({type(error).__name__}: {error})"
    return None if count > 0 else "CuPy sees no GPU"


def unavailable() -> str | None:
    """Why this package's kernels cannot run here, or None when they can: they need aisys to use a GPU, and CuPy."""
    try:
        if device.current() != "cuda":
            return f"{device.ENV}=cpu asks for the CPU" if device.requested() == "cpu" else "no CUDA GPU found"
    except RuntimeError as error:  # AISYS_DEVICE=cuda where there is no GPU
        return str(error)
    return cupy_problem()


def require():
    """The cupy module, ready to launch kernels; RuntimeError saying why where it is not."""
    problem = unavailable()
    if problem:
        raise RuntimeError(f"CUDA C kernels run on a GPU through CuPy, and cannot run here: {problem}")
    import cupy

    return cupy


def float32_tensor(name: str, value, ndim: int):
    """`value` if it is a float32 torch tensor of `ndim` dimensions; ValueError naming `name` otherwise."""
    import torch

    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or value.ndim != ndim:
        got = f"a {value.ndim}-D {value.dtype} tensor" if isinstance(value, torch.Tensor) else type(value).__name__
        raise ValueError(f"{name} must be a {ndim}-D float32 torch tensor, got {got}")
    return value


@functools.cache
def raw_kernel(source: str, name: str):
    """The kernel `name` (declared `extern "C" __global__`) of a CUDA C source, compiled once per process."""
    return require().RawKernel(source, name)


def to_cupy(tensor):
    """A CuPy view of a torch tensor, moved to the GPU and made contiguous if it is not already."""
    cupy = require()
    return cupy.asarray(tensor.detach().to("cuda").contiguous())


def to_torch(array, like):
    """A torch tensor of a CuPy array, on the device of the tensor `like`."""
    import torch

    return torch.as_tensor(array, device="cuda").to(like.device)


def ptx(source: str, arch: str = ARCH) -> str:
    """The PTX of a CUDA C source, compiled by NVRTC from NVIDIA's wheel (no GPU needed); RuntimeError with the
    compiler's messages when the source does not compile."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise RuntimeError("compiling without a GPU needs NVIDIA's compiler wheels (cuda-bindings and "
                           "nvidia-cuda-nvrtc): pip install -e '.[book]'") from None

    def ok(result):
        error, *values = result
        if error != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC: {nvrtc.nvrtcGetErrorString(error)[1].decode()}")
        return values[0] if len(values) == 1 else values

    program = ok(nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], []))
    try:
        options = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
        (error,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if error != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = bytearray(ok(nvrtc.nvrtcGetProgramLogSize(program)))
            ok(nvrtc.nvrtcGetProgramLog(program, log))
            raise RuntimeError(f"the CUDA C source does not compile:\n{bytes(log).decode(errors='replace').strip()}")
        text = bytearray(ok(nvrtc.nvrtcGetPTXSize(program)))
        ok(nvrtc.nvrtcGetPTX(program, text))
        return bytes(text).rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(program)
