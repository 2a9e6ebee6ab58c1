"""Peak compute and memory bandwidth of real chips, as data, each with its source.

GPU figures are the vendors' datasheet numbers for dense math (datasheets also
print "with sparsity" figures, which are 2x and apply only to 2:4-sparse
weights). CPU figures are derived the way a datasheet would: cores x clock x
FLOPs per cycle per core, with the FLOPs per cycle taken from the vendor's
optimisation guide; the derivation is kept beside the number.
"""

from dataclasses import dataclass, field

from ._validate import one_of
from .dtypes import canonical

TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True)
class Chip:
    name: str
    kind: str  # "gpu", "cpu" or "tpu"
    peak_flops: dict[str, float]  # dtype -> FLOP/s (dense; integer formats in OP/s)
    memory_bandwidth: float  # bytes/s to the chip's main memory (HBM or DRAM)
    memory_bytes: float
    source: str  # citation: document, table or page
    notes: str = ""
    derivation: dict[str, str] = field(default_factory=dict)

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for `dtype`, with a clear error when the chip has no figure for it."""
        dtype = canonical(dtype)
        return self.peak_flops[one_of(f"dtype (for {self.name})", dtype, tuple(self.peak_flops))]

    def ridge_point(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP/byte) where this chip stops being memory-bound."""
        return self.peak(dtype) / self.memory_bandwidth


def _cpu_peak(cores: int, ghz: float, flops_per_cycle: int) -> float:
    return cores * ghz * GIGA * flops_per_cycle


CHIPS = {
    chip.name: chip
    for chip in [
        Chip(
            name="NVIDIA H100 SXM5 80GB",
            kind="gpu",
            peak_flops={"fp64": 67 * TERA, "fp32": 67 * TERA, "tf32": 494.7 * TERA, "bf16": 989.4 * TERA,
                        "fp16": 989.4 * TERA, "fp8_e4m3": 1978.9 * TERA, "fp8_e5m2": 1978.9 * TERA,
                        "int8": 1978.9 * TERA},
            memory_bandwidth=3.35e12,
            memory_bytes=80e9,
            source="NVIDIA H100 Tensor Core GPU datasheet (2023), SXM column; fp64 is the FP64 Tensor Core figure. "
                   "The datasheet prints the Tensor Core figures with sparsity (1,979 BF16); the dense ones here are "
                   "half of those, as the H100 whitepaper's Table 3 gives them.",
        ),
        Chip(
            name="NVIDIA H200 SXM 141GB",
            kind="gpu",
            peak_flops={"fp64": 67 * TERA, "fp32": 67 * TERA, "tf32": 494.7 * TERA, "bf16": 989.4 * TERA,
                        "fp16": 989.4 * TERA, "fp8_e4m3": 1978.9 * TERA, "fp8_e5m2": 1978.9 * TERA,
                        "int8": 1978.9 * TERA},
            memory_bandwidth=4.8e12,
            memory_bytes=141e9,
            source="NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM column; Tensor Core figures are the "
                   "datasheet's with sparsity, halved.",
            notes="The same Hopper compute as the H100 SXM5 with faster, larger HBM3e: "
                  "memory-bound kernels gain, compute-bound ones do not.",
        ),
        Chip(
            name="NVIDIA A100 SXM4 80GB",
            kind="gpu",
            peak_flops={"fp64": 19.5 * TERA, "fp32": 19.5 * TERA, "tf32": 156 * TERA, "bf16": 312 * TERA,
                        "fp16": 312 * TERA, "int8": 624 * TERA},
            memory_bandwidth=2.039e12,
            memory_bytes=80e9,
            source="NVIDIA A100 Tensor Core GPU datasheet (2021), A100 80GB SXM column; fp64 is the FP64 Tensor Core "
                   "figure.",
        ),
        Chip(
            name="NVIDIA GeForce RTX 4090",
            kind="gpu",
            peak_flops={"fp32": 82.6 * TERA, "fp16": 165.2 * TERA, "bf16": 165.2 * TERA},
            memory_bandwidth=1008e9,
            memory_bytes=24e9,
            source="NVIDIA Ada GPU Architecture whitepaper (v2.1), Appendix A, GeForce RTX 4090; "
                   "fp16/bf16 are Tensor Core figures with FP32 accumulation.",
            notes="GeForce cards run FP16 with FP32 accumulation at half the rate of FP16 accumulation.",
        ),
        Chip(
            name="Google TPU v4",
            kind="tpu",
            peak_flops={"bf16": 275 * TERA, "int8": 275 * TERA},
            memory_bandwidth=1200e9,
            memory_bytes=32 * 2**30,
            source="Jouppi et al., 'TPU v4: An Optically Reconfigurable Supercomputer for Machine Learning "
                   "with Hardware Support for Embeddings', ISCA 2023 (275 TFLOP/s bf16, 1,200 GB/s HBM2, "
                   "32 GiB per chip).",
        ),
        Chip(
            name="AMD EPYC 9654 (Genoa, 96 cores)",
            kind="cpu",
            peak_flops={"fp32": _cpu_peak(96, 2.4, 32), "fp64": _cpu_peak(96, 2.4, 16)},
            memory_bandwidth=12 * 4800e6 * 8,
            memory_bytes=12 * 64 * 2**30,
            source="AMD EPYC 9004 Series processor datasheet (96 cores, 2.4 GHz base, 12 channels DDR5-4800); "
                   "AMD Software Optimization Guide for the Zen 4 microarchitecture (two 256-bit FMA pipes).",
            derivation={"fp32": "96 cores x 2.4 GHz x 32 FLOP/cycle (2 FMA pipes x 8 fp32 lanes x 2)",
                        "fp64": "96 cores x 2.4 GHz x 16 FLOP/cycle (2 FMA pipes x 4 fp64 lanes x 2)",
                        "memory_bandwidth": "12 channels x 4800 MT/s x 8 bytes"},
            notes="Base clock; all-core boost runs faster. Memory size assumes one 64 GiB DIMM per channel.",
        ),
        Chip(
            name="Intel Xeon Platinum 8480+ (Sapphire Rapids, 56 cores)",
            kind="cpu",
            peak_flops={"fp32": _cpu_peak(56, 2.0, 64), "fp64": _cpu_peak(56, 2.0, 32)},
            memory_bandwidth=8 * 4800e6 * 8,
            memory_bytes=8 * 64 * 2**30,
            source="Intel Xeon Platinum 8480+ product specification (56 cores, 2.0 GHz base, 8 channels DDR5-4800); "
                   "Intel 64 and IA-32 Architectures Optimization Reference Manual (two 512-bit FMA units per core).",
            derivation={"fp32": "56 cores x 2.0 GHz x 64 FLOP/cycle (2 FMA units x 16 fp32 lanes x 2)",
                        "fp64": "56 cores x 2.0 GHz x 32 FLOP/cycle (2 FMA units x 8 fp64 lanes x 2)",
                        "memory_bandwidth": "8 channels x 4800 MT/s x 8 bytes"},
            notes="AVX-512 only; the AMX tile unit adds much more for bf16/int8 matrix math. "
                  "Memory size assumes one 64 GiB DIMM per channel.",
        ),
    ]
}


def chip(name: str) -> Chip:
    """Look a chip up by its full name."""
    return CHIPS[one_of("name", name, tuple(CHIPS))]


# How a datasheet's peak is computed (an interview classic: "how is a GPU's xx TFLOPS figure
# computed?"): count the units that do the math, multiply by what each does per clock, and by the
# clock. A fused multiply-add counts as two FLOPs.


@dataclass(frozen=True)
class PeakFormula:
    """Peak FLOP/s = units x parts per unit x FLOPs per part per clock x clock."""

    units: int  # SMs on a GPU, cores on a CPU, TensorCores on a TPU
    unit: str
    parts: int  # the math units inside each: FP32 cores, Tensor Cores, FMA pipes, MXUs
    part: str
    flops_per_clock: int  # per part per clock; one FMA is 2
    ghz: float  # the clock the vendor's figure assumes
    note: str = ""

    @property
    def flops(self) -> float:
        return self.units * self.parts * self.flops_per_clock * self.ghz * GIGA

    def explain(self) -> str:
        """The product written out, e.g. '132 SMs x 128 FP32 cores x 2 FLOP/clock x 1.98 GHz = 66.9 TFLOP/s'."""
        return (f"{self.units} {self.unit} x {self.parts} {self.part} x {self.flops_per_clock} FLOP/clock"
                f" x {self.ghz:g} GHz = {self.flops / TERA:,.1f} TFLOP/s")


def _hopper_sxm() -> dict[str, PeakFormula]:
    # NVIDIA H100 Tensor Core GPU Architecture whitepaper (v1.0x), Table 3 (H100 SXM5): 132 SMs, 128 FP32
    # cores and 4 Tensor Cores per SM. The SXM5 figures imply two clocks: 1.98 GHz for the FP32/FP64 pipes
    # and FP64 Tensor Core math, 1.83 GHz (the Tensor Core boost clock) for the low-precision Tensor Core math.
    sm, tc, fp = 132, 4, 1.98
    tensor = 1.83
    return {
        "fp32": PeakFormula(sm, "SMs", 128, "FP32 cores", 2, fp),
        "fp64": PeakFormula(sm, "SMs", tc, "Tensor Cores", 64, fp, "FP64 Tensor Core: 32 FMA/clock per Tensor Core"),
        "tf32": PeakFormula(sm, "SMs", tc, "Tensor Cores", 512, tensor),
        "bf16": PeakFormula(sm, "SMs", tc, "Tensor Cores", 1024, tensor,
                            "dense: 512 FMA/clock per Tensor Core, twice the A100's per SM per clock"),
        "fp16": PeakFormula(sm, "SMs", tc, "Tensor Cores", 1024, tensor),
        "fp8_e4m3": PeakFormula(sm, "SMs", tc, "Tensor Cores", 2048, tensor),
        "fp8_e5m2": PeakFormula(sm, "SMs", tc, "Tensor Cores", 2048, tensor),
        "int8": PeakFormula(sm, "SMs", tc, "Tensor Cores", 2048, tensor),
    }


PEAK_FORMULAS: dict[str, dict[str, PeakFormula]] = {
    "NVIDIA H100 SXM5 80GB": _hopper_sxm(),
    "NVIDIA H200 SXM 141GB": _hopper_sxm(),  # the same GH100 compute as the H100 SXM5
    # NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs, 64 FP32 cores and 4 Tensor Cores per SM,
    # 256 dense FP16 FMA per Tensor Core per clock, 1.41 GHz boost.
    "NVIDIA A100 SXM4 80GB": {
        "fp32": PeakFormula(108, "SMs", 64, "FP32 cores", 2, 1.41),
        "fp64": PeakFormula(108, "SMs", 4, "Tensor Cores", 32, 1.41, "FP64 Tensor Core: 16 FMA/clock per Tensor Core"),
        "tf32": PeakFormula(108, "SMs", 4, "Tensor Cores", 256, 1.41),
        "bf16": PeakFormula(108, "SMs", 4, "Tensor Cores", 512, 1.41),
        "fp16": PeakFormula(108, "SMs", 4, "Tensor Cores", 512, 1.41),
        "int8": PeakFormula(108, "SMs", 4, "Tensor Cores", 1024, 1.41),
    },
    # NVIDIA Ada GPU Architecture whitepaper, Appendix A: 128 SMs, 128 FP32 cores and 4 Tensor Cores per SM,
    # 2.52 GHz boost; GeForce Tensor Cores accumulating in FP32 run at half their FP16-accumulate rate.
    "NVIDIA GeForce RTX 4090": {
        "fp32": PeakFormula(128, "SMs", 128, "FP32 cores", 2, 2.52),
        "fp16": PeakFormula(128, "SMs", 4, "Tensor Cores", 128, 2.52, "FP32 accumulate (256 with FP16 accumulate)"),
        "bf16": PeakFormula(128, "SMs", 4, "Tensor Cores", 128, 2.52, "FP32 accumulate"),
    },
    # Jouppi et al., ISCA 2023: 2 TensorCores per chip, 4 MXUs each, a 128 x 128 multiply-add array per MXU,
    # 1050 MHz.
    "Google TPU v4": {
        "bf16": PeakFormula(2, "TensorCores", 4, "MXUs", 2 * 128 * 128, 1.05),
        "int8": PeakFormula(2, "TensorCores", 4, "MXUs", 2 * 128 * 128, 1.05),
    },
    # The CPUs' figures are computed this way in the table above (see each Chip's derivation).
    "AMD EPYC 9654 (Genoa, 96 cores)": {
        "fp32": PeakFormula(96, "cores", 2, "256-bit FMA pipes", 16, 2.4),
        "fp64": PeakFormula(96, "cores", 2, "256-bit FMA pipes", 8, 2.4),
    },
    "Intel Xeon Platinum 8480+ (Sapphire Rapids, 56 cores)": {
        "fp32": PeakFormula(56, "cores", 2, "512-bit FMA units", 32, 2.0),
        "fp64": PeakFormula(56, "cores", 2, "512-bit FMA units", 16, 2.0),
    },
}


# Tensor Core instructions: the M x N x K of the D = A B + C that one instruction computes, from NVIDIA's PTX ISA
# (version 8.x): "Warp-level matrix multiply-accumulate instructions" (mma.sync, "Matrix shape" and its table of
# shapes per type) and "Asynchronous warpgroup level matrix multiply-accumulate" (wgmma.mma_async, whose N runs
# from 8 to 256 in steps of 8; the largest is listed). A warp (32 threads) issues mma.sync, a warpgroup of four
# warps (128 threads) issues wgmma, which only sm_90a (Hopper) has.


@dataclass(frozen=True)
class MMAShape:
    instruction: str
    m: int
    n: int
    k: int
    threads: int  # who issues it: a warp (32) or a warpgroup (128)
    dtypes: tuple  # the input formats it takes (aisys.dtypes names)
    arch: str  # the first target that has it for these formats

    @property
    def fmas(self) -> int:
        """Multiply-adds one instruction does: M x N x K."""
        return self.m * self.n * self.k


MMA_SHAPES = {shape.instruction: shape for shape in (
    MMAShape("mma.sync.m16n8k16", 16, 8, 16, 32, ("fp16", "bf16"), "sm_80"),
    MMAShape("mma.sync.m16n8k8", 16, 8, 8, 32, ("tf32",), "sm_80"),
    MMAShape("mma.sync.m16n8k32", 16, 8, 32, 32, ("int8",), "sm_80"),
    MMAShape("wgmma.mma_async.m64n256k16", 64, 256, 16, 128, ("fp16", "bf16"), "sm_90a"),
    MMAShape("wgmma.mma_async.m64n256k32", 64, 256, 32, 128, ("fp8_e4m3", "fp8_e5m2"), "sm_90a"),
)}

# A CPU's cache line: the unit its caches hold and its coherence protocol tracks. 64 bytes on every x86 core of
# the last two decades: Intel 64 and IA-32 Architectures Optimization Reference Manual (the cache hierarchy
# tables: 64-byte lines in L1, L2 and the last-level cache); AMD Software Optimization Guide for the Zen 4
# microarchitecture (64-byte cache lines at every level).
CPU_CACHE_LINE_BYTES = 64


def peak_formula(name: str, dtype: str) -> PeakFormula:
    """How `chip(name).peak(dtype)` comes about: units x parts x FLOPs per clock x clock."""
    formulas = PEAK_FORMULAS[one_of("name", name, tuple(PEAK_FORMULAS))]
    return formulas[one_of(f"dtype (for {name})", canonical(dtype), tuple(formulas))]


# torch.cuda.get_device_name() -> the chip in the table. Only names that pin down one table entry:
# an "NVIDIA H100 PCIe" or "NVIDIA A100-SXM4-40GB" has other peaks, and gets none.
DEVICE_NAMES = {
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM5 80GB",
    "NVIDIA H100 SXM5 80GB": "NVIDIA H100 SXM5 80GB",
    "NVIDIA H200": "NVIDIA H200 SXM 141GB",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100 SXM4 80GB",
    "NVIDIA GeForce RTX 4090": "NVIDIA GeForce RTX 4090",
}


def chip_for_device(device_name: str) -> Chip | None:
    """The table's chip for a name as torch reports it (torch.cuda.get_device_name), or None if unknown."""
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a string such as 'NVIDIA H100 80GB HBM3', got {device_name!r}")
    name = DEVICE_NAMES.get(device_name.strip())
    return CHIPS[name] if name else None
