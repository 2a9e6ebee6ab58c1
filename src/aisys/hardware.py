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
            source="NVIDIA H100 Tensor Core GPU datasheet (2023), SXM column; fp64 is the FP64 Tensor Core figure.",
        ),
        Chip(
            name="NVIDIA H200 SXM 141GB",
            kind="gpu",
            peak_flops={"fp64": 67 * TERA, "fp32": 67 * TERA, "tf32": 494.7 * TERA, "bf16": 989.4 * TERA,
                        "fp16": 989.4 * TERA, "fp8_e4m3": 1978.9 * TERA, "fp8_e5m2": 1978.9 * TERA,
                        "int8": 1978.9 * TERA},
            memory_bandwidth=4.8e12,
            memory_bytes=141e9,
            source="NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM column.",
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
            source="NVIDIA A100 Tensor Core GPU datasheet (2021), A100 80GB SXM column; fp64 is the FP64 Tensor Core figure.",
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
                   "with Hardware Support for Embeddings', ISCA 2023 (275 TFLOP/s bf16, 1,200 GB/s HBM2, 32 GiB per chip).",
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
