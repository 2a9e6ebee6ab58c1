# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a fusion pass over a graph IR
#
# **You will learn** how a compiler decides which operations of a graph run as one kernel: the cost it
# minimises (bytes moved to and from memory, which bound elementwise and reduction kernels on a GPU), the
# rules that make a grouping runnable (no cycle between kernels, what may fuse with a reduction or a
# matmul), a fusion pass that finds the grouping moving the fewest bytes, and a code generator that turns
# a fused elementwise group into one Triton kernel. TorchInductor (Ansel et al. 2024, PyTorch 2, section
# on TorchInductor's scheduler) and XLA's fusion passes make these decisions on every model they compile.
#
# **The graph** is plain data: `{"nodes": [node, ...], "outputs": [name, ...]}`, every node a dict
# `{"name", "op", "inputs" (names), "shape" (list of ints), "dtype" ("fp32"), "kind"}`:
#
# | kind | ops | shape |
# | --- | --- | --- |
# | `input` | `input`: an array in memory | given |
# | `elementwise` | `neg exp log sqrt tanh sigmoid relu gelu square`, `add sub mul div maximum` | numpy's broadcast |
# | `reduction` | `sum`, `max` over the **last** axis, keeping it | `[M, N] -> [M, 1]` |
# | `matmul` | `matmul` | `[M, K] @ [K, N] -> [M, N]` |
#
# `gelu` is the exact one, $\tfrac12 t\,(1 + \mathrm{erf}(t/\sqrt2))$. Every `dtype` is `"fp32"`, 4 bytes.
#
# **A grouping** is a list of groups, each a list of node names: one group is one kernel. It is
# **legal** when
#
# 1. every computed node (kind other than `input`) is in exactly one group, and no input is in a group;
# 2. the graph of groups (an edge from a producer's group to each consumer's group) has no cycle: no path
#    leaves a group and comes back into it, since that kernel would have to run both before and after another;
# 3. each group's ops mix: at most one **anchor** (a reduction or a matmul) per group, and
#    - no anchor: all nodes elementwise, all of the same shape (siblings that are not connected may fuse:
#      *horizontal* fusion);
#    - a reduction: every other node elementwise, of the reduction's **input** shape, and with a path to
#      the reduction through nodes of the group (a *prologue*; no elementwise op after the reduction);
#    - a matmul: every other node elementwise, of the matmul's **output** shape, reached from the matmul
#      through nodes of the group (an *epilogue*; no prologue, never two matmuls).
#
# **Bytes moved** by a grouping: for each group, the bytes of the distinct values it reads from outside
# itself (read by two of its nodes: once; read by two groups: once by each), plus the bytes of the values
# it computes that a node of another group reads or that are graph outputs (each written once). A value
# used only inside its group stays in registers: 0 bytes. A value's bytes are its elements times 4.
#
# **Errors**: `check_fusion(graph, groups)` returns `None` for a legal grouping and otherwise raises a
# `ValueError` whose message names `groups` and contains the word for what is wrong: `unknown` (a name that
# is not a computed node: an input, or no node), `duplicate` (a node in two groups), `missing` (a computed
# node in no group), `mix` (rule 3), `cycle` (rule 2). The checks' cases have one violation each.
#
# **Generated code**: `generate_triton(graph, group)` returns the source (a string) of a module that
# imports what it uses (`triton`, `triton.language`, `torch`, `aisys.tensors`), defines one `@triton.jit`
# kernel and a host function `run_fused(*arrays)`. `group` is elementwise nodes of one shape `S`. Its
# arguments are numpy arrays, one per value the group reads from memory, in the order of the graph's
# `nodes` list; it returns the values the group writes (as in *bytes moved*), in the order of `nodes`,
# stacked: a float32 numpy array of shape `[k] + S`. It must launch **one** kernel that loads each element
# of each array it reads once per element of `S` (a broadcast bias at its own offset) and stores each
# written value once: nothing else touches memory.
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers cannot. The generated code runs in the grader's Triton interpreter
# under the same rules as a kernel you write in a notebook.

# %%
import math

import numpy as np

from aisys import device

device.use_triton_interpreter()  # before triton is imported: on a CPU, Triton runs in its interpreter

from aisys_grader import checker

check = checker("04-autograd/fusion", globals())

KINDS = {"input": "input", "matmul": "matmul", "sum": "reduction", "max": "reduction",
         **{op: "elementwise" for op in
            "neg exp log sqrt tanh sigmoid relu gelu square add sub mul div maximum".split()}}


def node(name, op, inputs=(), shape=()):
    """A node as plain data; its kind follows from its op."""
    return {"name": name, "op": op, "inputs": list(inputs), "shape": list(shape), "dtype": "fp32",
            "kind": KINDS[op]}


def nodes_by_name(graph):
    return {n["name"]: n for n in graph["nodes"]}


def consumers(graph):
    """{name: [names of the nodes that read it]}."""
    users = {n["name"]: [] for n in graph["nodes"]}
    for n in graph["nodes"]:
        for i in dict.fromkeys(n["inputs"]):
            users[i].append(n["name"])
    return users


def value_bytes(n):
    """Bytes of a node's value: its elements times 4 (float32)."""
    return 4 * math.prod(n["shape"])


def evaluate(graph, inputs):
    """{output: array} of the graph on {input name: array}, node by node in numpy (the nodes listed in order)."""
    erf = np.vectorize(math.erf)
    ops = {"neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
           "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "relu": lambda a: np.maximum(a, 0),
           "gelu": lambda a: 0.5 * a * (1 + erf(a / math.sqrt(2))), "square": np.square, "add": np.add,
           "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum, "matmul": np.matmul,
           "sum": lambda a: a.sum(-1, keepdims=True), "max": lambda a: a.max(-1, keepdims=True)}
    values = {}
    for n in graph["nodes"]:
        if n["op"] == "input":
            values[n["name"]] = np.asarray(inputs[n["name"]], np.float64)
        else:
            values[n["name"]] = ops[n["op"]](*[values[i] for i in n["inputs"]])
    return {o: values[o] for o in graph["outputs"]}


# y = gelu(x + bias) + residual: the graph of a transformer's feed-forward ending
M, N = 5, 1531
CHAIN = {"nodes": [node("x", "input", shape=[M, N]), node("bias", "input", shape=[N]),
                   node("residual", "input", shape=[M, N]), node("t", "add", ["x", "bias"], [M, N]),
                   node("u", "gelu", ["t"], [M, N]), node("y", "add", ["u", "residual"], [M, N])],
         "outputs": ["y"]}
# softmax's numerator and denominator: e = exp(x) read by a reduction and by an elementwise op
SOFTMAX = {"nodes": [node("x", "input", shape=[M, N]), node("e", "exp", ["x"], [M, N]),
                     node("s", "sum", ["e"], [M, 1]), node("p", "div", ["e", "s"], [M, N])], "outputs": ["p"]}

# %% [markdown]
# ## 1. Bytes moved
#
# Write `bytes_moved(graph, groups)`. Unfused, `CHAIN` moves `t` and `u` twice each (written, read back);
# fused, it reads `x`, `bias`, `residual` and writes `y` once.

# %% tags=["solution"]
def reads_and_writes(graph, group):
    """(values the group reads from memory, values it writes), each in the order of graph["nodes"]."""
    ### BEGIN SOLUTION
    by_name, users, members = nodes_by_name(graph), consumers(graph), set(group)
    reads = {i for name in group for i in by_name[name]["inputs"] if i not in members}
    writes = {name for name in group
              if name in graph["outputs"] or any(u not in members for u in users[name])}
    order = [n["name"] for n in graph["nodes"]]
    return [n for n in order if n in reads], [n for n in order if n in writes]
    ### END SOLUTION


def bytes_moved(graph, groups):
    """Bytes the grouping reads and writes, summed over its groups."""
    ### BEGIN SOLUTION
    by_name = nodes_by_name(graph)
    total = 0
    for group in groups:
        reads, writes = reads_and_writes(graph, group)
        total += sum(value_bytes(by_name[name]) for name in reads + writes)
    return total
    ### END SOLUTION


print("CHAIN unfused:", bytes_moved(CHAIN, [["t"], ["u"], ["y"]]), "bytes; fused:",
      bytes_moved(CHAIN, [["t", "u", "y"]]), "bytes")

# %% tags=["check"]
check("bytes")
### BEGIN HIDDEN TESTS
check("bytes", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Legality
#
# Write `check_fusion(graph, groups)`: `None`, or the `ValueError` the conventions describe. In
# `SOFTMAX`, `[["e", "p"], ["s"]]` is a cycle (`s` reads `e` from the first group, `p` reads `s` back
# into it); `[["e", "s", "p"]]` has an op after the reduction; `[["e", "s"], ["p"]]` is legal.

# %% tags=["solution"]
def group_cycle(graph, groups):
    """True if the graph of groups has a cycle."""
    ### BEGIN SOLUTION
    where = {name: g for g, group in enumerate(groups) for name in group}
    edges = {g: set() for g in range(len(groups))}
    for n in graph["nodes"]:
        for i in n["inputs"]:
            if i in where and where[i] != where[n["name"]]:
                edges[where[i]].add(where[n["name"]])
    state = {}

    def visit(g):  # depth first: meeting an open group again closes a cycle
        state[g] = "open"
        for h in edges[g]:
            if state.get(h) == "open" or (h not in state and visit(h)):
                return True
        state[g] = "done"
        return False

    return any(g not in state and visit(g) for g in range(len(groups)))
    ### END SOLUTION


def mix_problem(graph, group):
    """Why the group's ops cannot be one kernel (rule 3), or "" if they can."""
    ### BEGIN SOLUTION
    by_name, users, members = nodes_by_name(graph), consumers(graph), set(group)
    anchors = [n for n in group if by_name[n]["kind"] in ("reduction", "matmul")]
    others = [n for n in group if n not in anchors]
    if len(anchors) > 1:
        return f"two anchors {anchors[:2]}"
    if not anchors:
        return "" if len({tuple(by_name[n]["shape"]) for n in others}) <= 1 else "elementwise shapes differ"

    def reaches(start, goal):  # a path start -> goal through members of the group
        todo, seen = [start], set()
        while todo:
            for nxt in users[todo.pop()]:
                if nxt == goal:
                    return True
                if nxt in members and nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    anchor = by_name[anchors[0]]
    if anchor["kind"] == "reduction":
        shape = by_name[anchor["inputs"][0]]["shape"]
        bad = [n for n in others if by_name[n]["shape"] != shape or not reaches(n, anchor["name"])]
        return f"{bad[0]} is not a prologue of the reduction" if bad else ""
    bad = [n for n in others if by_name[n]["shape"] != anchor["shape"] or not reaches(anchor["name"], n)]
    return f"{bad[0]} is not an epilogue of the matmul" if bad else ""
    ### END SOLUTION


def check_fusion(graph, groups):
    """None if `groups` is a legal fusion of `graph`; ValueError naming `groups` and what is wrong otherwise."""
    ### BEGIN SOLUTION
    by_name, seen = nodes_by_name(graph), set()
    for group in groups:
        for name in group:
            if name not in by_name or by_name[name]["kind"] == "input":
                raise ValueError(f"groups: unknown node {name!r}: not a computed node")
            if name in seen:
                raise ValueError(f"groups: duplicate: {name!r} is in two groups")
            seen.add(name)
    missing = [n["name"] for n in graph["nodes"] if n["kind"] != "input" and n["name"] not in seen]
    if missing:
        raise ValueError(f"groups: missing: {missing[0]!r} is in no group")
    for group in groups:
        problem = mix_problem(graph, group)
        if problem:
            raise ValueError(f"groups: illegal mix of ops in {group}: {problem}")
    if group_cycle(graph, groups):
        raise ValueError("groups: a cycle between groups: a path leaves a group and comes back")
    return None
    ### END SOLUTION


# %%
def refusal(graph, groups):
    """[type name, message] of what check_fusion(graph, groups) raises, or None if it returns."""
    try:
        check_fusion(graph, groups)
    except NotImplementedError:
        raise
    except Exception as error:  # any error is reported, and judged by the check
        return [type(error).__name__, str(error)]
    return None


for groups in ([["e", "p"], ["s"]], [["e", "s", "p"]], [["e", "s"], ["p"]]):
    print(groups, "->", refusal(SOFTMAX, groups))

# %% tags=["check"]
check("legality")
### BEGIN HIDDEN TESTS
check("legality", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. The fusion pass
#
# Write `fuse(graph)`: a legal grouping with the fewest bytes moved. The checks' graphs have at most 6
# computed nodes, so every grouping can be tried: the partitions of 6 nodes into groups number 203 (the
# Bell number B(6); B(10) is 115975, and compilers use heuristics beyond that). A greedy pass (start from one
# group per node; keep merging the legal pair of groups that saves the most bytes, a producer and its
# consumer or two siblings that read the same value) is what large graphs get, and it can stop short: on a
# graph where e = exp(x) feeds a reduction s and also m = e * sigmoid(x), the merge that saves most at first
# is the one that later closes a cycle. The grader compares your bytes with the least over every grouping,
# and runs your groups, one kernel after another, in its own numpy executor: the graph's outputs must come
# out as `evaluate` computes them.

# %% tags=["solution"]
def partitions(items):
    """Every way to split the list `items` into non-empty groups."""
    ### BEGIN SOLUTION
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in partitions(rest):
        yield [[first]] + part  # first alone, or added to one of the groups of the rest
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]
    ### END SOLUTION


def fuse(graph):
    """A legal grouping of graph's computed nodes that moves the fewest bytes."""
    ### BEGIN SOLUTION
    computed = [n["name"] for n in graph["nodes"] if n["kind"] != "input"]
    best, least = None, None
    for groups in partitions(computed):
        if any(mix_problem(graph, group) for group in groups) or group_cycle(graph, groups):
            continue
        moved = bytes_moved(graph, groups)
        if least is None or moved < least:
            best, least = groups, moved
    return best
    ### END SOLUTION


for name, graph in [("CHAIN", CHAIN), ("SOFTMAX", SOFTMAX)]:
    groups = fuse(graph)
    print(name, groups, bytes_moved(graph, groups), "bytes")

# %% tags=["check"]
check("fusion_pass")
### BEGIN HIDDEN TESTS
check("fusion_pass", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Generating the kernel
#
# Write `generate_triton(graph, group)`. Flatten `S` to `n` elements and give each program a block of
# them: `offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)`, masked with `offsets < n` (`n` is
# rarely a multiple of `BLOCK`). A value of the full shape is at `offsets`; a bias of shape `[N]` under
# `[M, N]` at `offsets % N` (in general, numpy's broadcasting: the index along each axis of `S` where the
# operand's size is not 1, times the operand's stride). Load each value read once, compute every node in
# registers (in float32: `tl.math.erf`, `tl.exp`, `tl.sigmoid`, `tl.maximum`; tanh is
# `2 * sigmoid(2 t) - 1`), store each value written once. In `run_fused`, `aisys.tensors.to_device(a,
# "fp32")` makes each array a tensor on the device (where a load outside the array is an error naming the
# line), and `aisys.tensors.to_numpy` brings the result back.
#
# The grader gets the source with `generate_triton`, runs it as one more cell after yours in its Triton
# interpreter, calls `run_fused` and counts the elements each launch loads and stores. Below, the same
# happens here.

# %% tags=["solution"]
TRITON_OPS = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
              "maximum": "tl.maximum({0}, {1})", "neg": "(-{0})", "exp": "tl.exp({0})", "log": "tl.log({0})",
              "sqrt": "tl.sqrt({0})", "sigmoid": "tl.sigmoid({0})", "tanh": "(2.0 * tl.sigmoid(2.0 * {0}) - 1.0)",
              "relu": "tl.maximum({0}, 0.0)", "square": "({0} * {0})",
              "gelu": "(0.5 * {0} * (1.0 + tl.math.erf({0} * 0.7071067811865476)))"}


def offset_of(shape, full):
    """The offset, in an operand of `shape` broadcast to `full`, of the element at flat index `offsets`."""
    ### BEGIN SOLUTION
    shape = [1] * (len(full) - len(shape)) + list(shape)
    if shape == list(full):
        return "offsets"
    terms, stride = [], 1
    for d in reversed(range(len(full))):
        if shape[d] != 1:
            index = f"((offsets // {math.prod(full[d + 1:])}) % {full[d]})"
            terms.append(f"{index} * {stride}")
            stride *= shape[d]
    return " + ".join(terms) if terms else "0"
    ### END SOLUTION


def generate_triton(graph, group):
    """Source of a Triton kernel computing the elementwise `group` and of its host function run_fused."""
    ### BEGIN SOLUTION
    by_name = nodes_by_name(graph)
    order = [n["name"] for n in graph["nodes"]]
    group = [name for name in order if name in group]
    shape = by_name[group[0]]["shape"]
    reads, writes = reads_and_writes(graph, group)
    var = {name: f"v{k}" for k, name in enumerate(order)}
    pointers = [f"in{k}" for k in range(len(reads))]
    code = ["import triton", "import triton.language as tl", "import torch",
            "from aisys.tensors import to_device, to_numpy", "", "", "@triton.jit",
            f"def fused_kernel({', '.join(pointers)}, out, n, BLOCK: tl.constexpr):",
            "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
            "    mask = offsets < n"]
    for pointer, name in zip(pointers, reads):
        offset = offset_of(by_name[name]["shape"], shape)
        code.append(f"    {var[name]} = tl.load({pointer} + {offset}, mask=mask).to(tl.float32)")
    for name in group:
        code.append(f"    {var[name]} = " + TRITON_OPS[by_name[name]["op"]].format(
            *[var[i] for i in by_name[name]["inputs"]]))
    for k, name in enumerate(writes):
        code.append(f"    tl.store(out + {k} * n + offsets, {var[name]}, mask=mask)")
    n = math.prod(shape)
    code += ["", "", "def run_fused(*arrays):",
             "    tensors = [to_device(a, 'fp32') for a in arrays]",
             f"    out = torch.empty(({len(writes)}, {n}), dtype=torch.float32, device=tensors[0].device)",
             f"    fused_kernel[(triton.cdiv({n}, 1024),)](*tensors, out, {n}, BLOCK=1024)",
             f"    return to_numpy(out).reshape({[len(writes)] + list(shape)})", ""]
    return "\n".join(code)
    ### END SOLUTION


print(generate_triton(CHAIN, ["t", "u", "y"]))

# %% [markdown]
# Run it here as the grader does (a module of its own, so that Triton can read the kernel's source):

# %%
def run_generated(source, *arrays):
    """Write the generated source to a module, import it, call its run_fused."""
    import importlib.util
    import pathlib
    import tempfile

    path = pathlib.Path(tempfile.mkdtemp()) / "generated_fusion.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("generated_fusion", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run_fused(*arrays)


rng = np.random.default_rng(0)
arrays = {"x": rng.standard_normal((M, N)), "bias": rng.standard_normal(N), "residual": rng.standard_normal((M, N))}
got = run_generated(generate_triton(CHAIN, ["t", "u", "y"]), arrays["x"], arrays["bias"], arrays["residual"])
print("largest error:", np.abs(got[0] - evaluate(CHAIN, arrays)["y"]).max())

# %% tags=["check"]
check("generated_kernel")
### BEGIN HIDDEN TESTS
check("generated_kernel", hidden=True)
### END HIDDEN TESTS
