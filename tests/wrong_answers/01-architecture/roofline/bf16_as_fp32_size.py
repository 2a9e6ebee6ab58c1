"""Sizes bf16 like fp32 (it has fp32's exponent, but only 16 bits)."""

FAILS = ["bytes_per_element", "gemm_cost", "elementwise_cost", "softmax_cost"]


def bytes_per_element(dtype):
    return {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 4, "fp8_e4m3": 1, "fp8_e5m2": 1,
            "int32": 4, "int8": 1, "int4": 0.5}[dtype]
