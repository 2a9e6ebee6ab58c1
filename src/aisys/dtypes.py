"""Number formats by name: their width in bits and bytes per element.

Names follow the common short forms (torch uses float16 for fp16 and so on);
`canonical` accepts both.
"""

from ._validate import one_of

# Bits per element. tf32 is a Tensor Core compute format stored in 32-bit registers,
# so it costs 4 bytes in memory although it carries only 19 significant bits.
BITS = {
    "fp64": 64,
    "fp32": 32,
    "tf32": 32,
    "fp16": 16,
    "bf16": 16,
    "fp8_e4m3": 8,
    "fp8_e5m2": 8,
    "int32": 32,
    "int8": 8,
    "int4": 4,
}

ALIASES = {
    "float64": "fp64",
    "float32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
}


def canonical(dtype: str) -> str:
    """The short name of a format, accepting torch's long names too."""
    name = ALIASES.get(dtype, dtype) if isinstance(dtype, str) else dtype
    return one_of("dtype", name, tuple(BITS))


def bytes_per_element(dtype: str) -> float:
    """Bytes one element occupies in memory (0.5 for int4: two share a byte)."""
    return BITS[canonical(dtype)] / 8
