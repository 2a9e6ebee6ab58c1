"""Reduces within each warp only: every warp normalises its own 32 columns with its own maximum and sum."""

FAILS = ["cuda_softmax", "cuda_softmax_stable"]

for _neutral, _combine in (("NEG_INF", "        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));\n"),
                           ("0.0f", "        v += __shfl_xor_sync(FULL_MASK, v, offset);\n")):
    _across_warps = (f"    v = lane < BLOCK / WARP ? scratch[lane] : {_neutral};\n"
                     + "    for (int offset = WARP / 2; offset > 0; offset >>= 1)"
                     + ("  // each warp combines all of them\n" if _neutral == "NEG_INF" else "\n") + _combine)
    assert _across_warps in SOFTMAX_SOURCE, _across_warps  # noqa: F821
    SOFTMAX_SOURCE = SOFTMAX_SOURCE.replace(_across_warps, "")  # noqa: F821
assert "scratch[lane]" not in SOFTMAX_SOURCE
