"""Triton source for one fused elementwise group: a @triton.jit kernel and its host function `run_fused`.

The kernel walks the group's shape S flattened, BLOCK elements per program. It loads each value the group reads
from memory once per element (a broadcast operand, such as a bias of shape [N] under [M, N], at the offset its own
strides give: `offsets % N`), computes every node of the group in registers, in float32, and stores only the values
used outside the group or returned by the graph (`fusion.reads_and_writes`), each once: no intermediate touches
memory. Every load and store is masked with `offsets < n`, for the ragged last block.

`run_fused(*arrays)` takes numpy arrays, one per value read, in the order of `fusion.reads_and_writes`, and returns
the written values stacked, a numpy array of shape [k, *S] for k values written (float32 for bf16 data). The code
stays in aisys_grader's Triton dialect (grammar.TRITON): it imports triton, triton.language, torch, aisys.tensors.
"""

import math

from . import fusion, ir

TRITON_OPS = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "maximum": "tl.maximum({0}, {1})", "neg": "(-{0})", "exp": "tl.exp({0})", "log": "tl.log({0})",
    "sqrt": "tl.sqrt({0})", "sigmoid": "tl.sigmoid({0})", "tanh": "(2.0 * tl.sigmoid(2.0 * {0}) - 1.0)",
    "relu": "tl.maximum({0}, 0.0)", "gelu": "(0.5 * {0} * (1.0 + tl.math.erf({0} * 0.7071067811865476)))",
    "square": "({0} * {0})"}


def offset_expression(shape: list, full: list, flat: str = "offsets") -> str:
    """The offset into a contiguous array of `shape`, broadcast (numpy's rules) to `full`, of the element at flat
    index `flat` of `full`: `offsets` itself for the full shape, `offsets % N` for a row vector of N."""
    shape = [1] * (len(full) - len(shape)) + list(shape)
    if shape == list(full):
        return flat
    terms, stride = [], 1
    for d in reversed(range(len(full))):
        if shape[d] != 1:
            inner = math.prod(full[d + 1:])
            index = flat if inner == 1 else f"({flat} // {inner})"
            if d > 0:
                index = f"({index} % {full[d]})"
            terms.append(index if stride == 1 else f"{index} * {stride}")
            stride *= shape[d]
    return " + ".join(reversed(terms)) if terms else "0"


def generate_triton(graph: dict, group: list, block: int = 1024) -> str:
    """Source of a Triton kernel `fused_kernel` computing the elementwise `group` of `graph`, and of its host
    function `run_fused` (the module docstring says how it is called); ValueError naming `group` if the group is
    not elementwise nodes of one shape."""
    ir.validate(graph)
    by_name = ir.nodes_by_name(graph)
    if not isinstance(group, list) or not group or any(n not in by_name for n in group):
        raise ValueError(f"group: expected a non-empty list of the graph's node names, got {group!r}")
    if any(ir.kind(by_name[n]) != "elementwise" for n in group) or fusion.illegal_mix(graph, group):
        raise ValueError(f"group: only elementwise nodes of one shape generate an elementwise kernel, got {group}")
    order = {n: k for k, n in enumerate(ir.topological(graph))}
    group = sorted(group, key=order.get)
    shape = by_name[group[0]]["shape"]
    reads, writes = fusion.reads_and_writes(graph, group)
    var = {name: f"v{k}" for k, name in enumerate(ir.topological(graph))}
    ins = [f"in{k}_ptr" for k in range(len(reads))]
    lines = ["import triton", "import triton.language as tl", "import torch", "",
             "from aisys.tensors import TORCH_DTYPES, to_device, to_numpy", "", "", "@triton.jit",
             f"def fused_kernel({', '.join(ins + ['out_ptr', 'n', 'BLOCK: tl.constexpr'])}):",
             "    # " + ", ".join(f"{n}: {by_name[n]['op']}" for n in group),
             "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
             "    mask = offsets < n"]
    for ptr, name in zip(ins, reads):
        offset = offset_expression(by_name[name]["shape"], shape)
        lines.append(f"    {var[name]} = tl.load({ptr} + {offset}, mask=mask, other=0.0).to(tl.float32)"
                     f"  # {name}")
    for name in group:
        n = by_name[name]
        args = [repr(float(by_name[i]["value"])) if by_name[i]["op"] == "constant" else var[i] for i in n["inputs"]]
        lines.append(f"    {var[name]} = {TRITON_OPS[n['op']].format(*args)}  # {name}")
    for k, name in enumerate(writes):
        where = "out_ptr + offsets" if k == 0 else f"out_ptr + {k} * n + offsets"
        lines.append(f"    tl.store({where}, {var[name]}.to(out_ptr.dtype.element_ty), mask=mask)  # {name}")
    dtypes = [by_name[name].get("dtype", "fp32") for name in reads]
    out_dtype = by_name[writes[0]].get("dtype", "fp32")
    n = math.prod(shape)
    lines += ["", "", f"def run_fused({', '.join(f'a{k}' for k in range(len(reads)))}):",
              f'    """{", ".join(writes)} of shape {shape}, stacked, from {", ".join(reads)}."""']
    for k, dtype in enumerate(dtypes):
        lines.append(f"    t{k} = to_device(a{k}, {dtype!r})")
    if not reads:
        raise ValueError(f"group: {group} reads no array, nothing to launch over")
    lines.append(f"    out = torch.empty(({len(writes)}, {n}), dtype=TORCH_DTYPES[{out_dtype!r}], device=t0.device)")
    lines += [f"    n = {n}", "    if n:",
              f"        fused_kernel[(triton.cdiv(n, {block}),)]"
              f"({', '.join([f't{k}' for k in range(len(reads))] + ['out', 'n'])}, BLOCK={block})",
              f"    return to_numpy(out).reshape({[len(writes)] + list(shape)})", ""]
    return "\n".join(lines)
