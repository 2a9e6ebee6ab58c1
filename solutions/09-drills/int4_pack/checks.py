"""Checks: packing 4-bit codes into int32 words and back, in GPTQ's sequential and AWQ's interleaved orders.

Both are compared with aisys.quant.int4 exactly, with the dtype the notebook states (int32 words, uint8 codes).
Visible cases are two rows of codes whose hex words show the order; hidden cases add, on every seed, a 15 in
the top nibble (a negative word), eight 15s (-1), a single 8 on top (INT32_MIN), no rows at all, the words
0x80000000, 0x7FFFFFFF and -1 to unpack, then a property check each: codes or words drawn by hypothesis,
the first failing case shrunk.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.quant import int4
from aisys_grader.checks import check, compare_cases, compare_property

ORDERS = ("sequential", "awq")
EXAMPLES = 25  # per property check: the explicit cases already hold every known mistake
INT32 = np.iinfo(np.int32)
VISIBLE = np.array([[0, 1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1, 0]])
EDGES = np.array([[0, 0, 0, 0, 0, 0, 0, 15], [15] * 8, [0, 0, 0, 0, 0, 0, 0, 8], [15, 0, 0, 0, 0, 0, 0, 0]])


@st.composite
def PACK_CASES(draw):
    rows, words = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    q = draw(hnp.arrays(np.int64, (rows, 8 * words), elements=st.integers(0, 15)))
    return {"q": q, "order": draw(st.sampled_from(ORDERS))}


UNPACK_CASES = st.fixed_dictionaries({
    "words": hnp.arrays(np.int32, hnp.array_shapes(min_dims=2, max_dims=2, max_side=4)),
    "order": st.sampled_from(ORDERS)})


def _pack_hint(case, got, expected):
    if not isinstance(got, np.ndarray) or got.dtype != np.int32:
        return "The words must be int32: reinterpret the low 32 bits (.astype(np.uint32).view(np.int32))."
    return ("Element j sits at bits 4j (sequential) or at nibble j // 2 + 4 (j % 2) (awq), element 0 in the LOW "
            "bits; a 15 on top makes the word negative by wrapping.")


@check(points=2)
def pack(student, rng, hidden):
    """pack(q, order) gives int32 words bit for bit, both orders, negative words included."""
    cases = [{"q": VISIBLE, "order": order} for order in ORDERS]
    if hidden:
        cases = [{"q": EDGES, "order": order} for order in ORDERS]
        cases += [{"q": np.zeros((0, 16), np.int64), "order": "awq"},
                  {"q": rng.integers(0, 16, (3, 24)), "order": "sequential"}]
    compare_cases(student, "pack", cases, int4.pack, returns="array", hidden=hidden, tolerance=(0, 0),
                  dtype="int32", hint=_pack_hint)
    if hidden:
        compare_property(student, "pack", PACK_CASES(), int4.pack, rng=rng, returns="array", hidden=hidden,
                         tolerance=(0, 0), dtype="int32", examples=EXAMPLES)


@check(points=2)
def unpack(student, rng, hidden):
    """unpack(words, order) gives uint8 codes in [0, 15] bit for bit, both orders, for negative words too."""
    cases = [{"words": int4.pack(VISIBLE, order), "order": order} for order in ORDERS]
    if hidden:
        edges = np.array([[-1, INT32.min, INT32.max, int(int4.pack(EDGES[:1])[0, 0])]], np.int32)
        cases = [{"words": edges, "order": order} for order in ORDERS]
        cases += [{"words": np.zeros((0, 2), np.int32), "order": "sequential"},
                  {"words": rng.integers(INT32.min, INT32.max, (3, 2), dtype=np.int64).astype(np.int32),
                   "order": "awq"}]
    compare_cases(student, "unpack", cases, lambda words, order: int4.unpack(words, order), returns="array",
                  hidden=hidden, tolerance=(0, 0), dtype="uint8",
                  hint=lambda case, got, expected: "Shift, then mask with 0xF (the shift of an int32 is arithmetic); "
                                                   "element j sits at nibble j (sequential) or j // 2 + 4 (j % 2).")
    if hidden:
        compare_property(student, "unpack", UNPACK_CASES, lambda words, order: int4.unpack(words, order), rng=rng,
                         returns="array", hidden=hidden, tolerance=(0, 0), dtype="uint8", examples=EXAMPLES)
