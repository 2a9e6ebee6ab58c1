"""Checks: bytes moved by a fusion, its legality, a fusion pass, and Triton code generated for a fused group.

Graphs are built here from aisys.graph.ir nodes, with shapes from the seed (hidden) or fixed (visible); their
structure is fixed, one graph per lesson: CHAIN (gelu(x + bias) + residual: vertical fusion, a broadcast bias),
DIAMOND (a value read by two branches that meet again), SOFTMAX (exp read by a reduction and by the division
after it: fusing e with p and leaving s outside is a cycle), GATED_SOFTMAX (the same, where that cycle would
save a read of x), REDUCE (ops after a reduction: the boundary),
SIBLINGS (two chains reading x: horizontal fusion reads x once), MATMUL (a prologue, a matmul with a bias and
relu epilogue, then a second matmul). Byte counts are exact integers; the fusion pass is compared with the
exhaustive optimum of aisys.graph.fusion (Bell(7) = 877 groupings at most) and its groups are run in the
reference's numpy executor, whose outputs must match aisys.graph.ir.evaluate. The generated kernel runs in the
grader's Triton interpreter (the clean room), where loads and stores are counted.
"""

import re

import numpy as np

from aisys.graph import fusion, ir

from aisys_grader.checks import check
from aisys_grader.compare import CheckFailure, assert_close, shown, unredacted


def _shape(rng, hidden):
    return (int(rng.integers(2, 9)), int(rng.integers(3, 40))) if hidden else (4, 6)


def chain(M, N):
    n = ir.node
    return {"nodes": [n("x", "input", shape=[M, N]), n("bias", "input", shape=[N]),
                      n("residual", "input", shape=[M, N]),
                      n("t", "add", ["x", "bias"], [M, N]), n("u", "gelu", ["t"], [M, N]),
                      n("y", "add", ["u", "residual"], [M, N])], "outputs": ["y"]}


def diamond(M, N):
    n = ir.node
    return {"nodes": [n("x", "input", shape=[M, N]), n("a", "relu", ["x"], [M, N]), n("b", "sigmoid", ["a"], [M, N]),
                      n("c", "tanh", ["a"], [M, N]), n("d", "mul", ["b", "c"], [M, N])], "outputs": ["d"]}


def softmax(M, N):
    n = ir.node
    return {"nodes": [n("x", "input", shape=[M, N]), n("e", "exp", ["x"], [M, N]), n("s", "sum", ["e"], [M, 1]),
                      n("p", "div", ["e", "s"], [M, N])], "outputs": ["p"]}


def scaled_softmax(M, N):
    n = ir.node
    return {"nodes": [n("x", "input", shape=[M, N]), n("e", "exp", ["x"], [M, N]), n("s", "sum", ["e"], [M, 1]),
                      n("g", "sigmoid", ["x"], [M, N]), n("m", "mul", ["e", "g"], [M, N]),
                      n("p", "div", ["m", "s"], [M, N])], "outputs": ["p"]}


def reduce(M, N):
    n = ir.node
    return {"nodes": [n("x", "input", shape=[M, N]), n("w", "input", shape=[M, 1]), n("q", "square", ["x"], [M, N]),
                      n("s", "sum", ["q"], [M, 1]), n("r", "sqrt", ["s"], [M, 1]), n("y", "mul", ["r", "w"], [M, 1])],
            "outputs": ["y"]}


def siblings(M, N):
    n = ir.node
    return {"nodes": [n("x", "input", shape=[M, N]), n("a", "relu", ["x"], [M, N]),
                      n("a2", "square", ["a"], [M, N]),
                      n("b", "neg", ["x"], [M, N]), n("b2", "exp", ["b"], [M, N])], "outputs": ["a2", "b2"]}


def matmul(M, N):
    K = N + 1
    n = ir.node
    return {"nodes": [n("x", "input", shape=[M, K]), n("w", "input", shape=[K, N]), n("bias", "input", shape=[N]),
                      n("w2", "input", shape=[N, N]), n("p", "relu", ["x"], [M, K]),
                      n("m", "matmul", ["p", "w"], [M, N]),
                      n("t", "add", ["m", "bias"], [M, N]), n("h", "relu", ["t"], [M, N]),
                      n("m2", "matmul", ["h", "w2"], [M, N]), n("y", "add", ["m2", "h"], [M, N])],
            "outputs": ["y"]}


GRAPHS = {"CHAIN": chain, "DIAMOND": diamond, "SOFTMAX": softmax, "GATED_SOFTMAX": scaled_softmax,
          "REDUCE": reduce, "SIBLINGS": siblings,
          "MATMUL": matmul}


def _graphs(rng, hidden, names=GRAPHS):
    return [(name, GRAPHS[name](*_shape(rng, hidden))) for name in names]


# (graph, grouping) whose bytes are compared: each teaches one rule of the count
BYTES_CASES = [
    ("CHAIN", [["t"], ["u"], ["y"]]),  # unfused: t and u written and read back
    ("CHAIN", [["t", "u", "y"]]),  # fused: t and u never leave registers
    ("CHAIN", [["t", "u"], ["y"]]),
    ("DIAMOND", [["a", "b", "c", "d"]]),  # a read by b and c inside the group: read once, from x
    ("DIAMOND", [["b", "c"], ["a"], ["d"]]),  # b and c both read a: the group reads it once
    ("SOFTMAX", [["e", "s"], ["p"]]),  # e is read by p outside its group: written though s is fused with it
    ("SIBLINGS", [["a", "b"], ["a2"], ["b2"]]),  # x read once by a horizontal group
    ("MATMUL", [["p"], ["m", "t", "h"], ["m2", "y"]]),  # h is read by the next group: written
]


@check(points=2)
def bytes(student, rng, hidden):
    """bytes_moved equals the count of the conventions exactly: distinct values read from outside each group, values
    written that another group reads or the graph returns; intermediates inside a group cost nothing."""
    graphs = dict(_graphs(rng, hidden))
    for i, (name, groups) in enumerate(BYTES_CASES, 1):
        got = student.call("bytes_moved", graphs[name], groups, returns="number")
        expected = fusion.bytes_moved(graphs[name], groups)
        if got != expected:
            raise CheckFailure(f"{'hidden case' if hidden else 'case'} {i}: bytes_moved({name}, {groups}) is "
                               f"{unredacted(f'{got!r}, not {expected}', 'wrong')}: " + _bytes_hint(name, groups))


def _bytes_hint(name, groups):
    hints = {1: "every value crosses memory twice here (written, read back)",
             2: "one kernel: x, bias and residual read once, y written once; t and u stay in registers",
             4: "x is read once by the group, however many of its nodes read it",
             5: "b and c both read a: the group reads it once",
             6: "e is read by p, in another group: it must be written, and p reads it back",
             7: "the group of a and b reads x once (horizontal fusion)",
             8: "h is read by the next group: written once, read once"}
    k = next(k for k, case in enumerate(BYTES_CASES, 1) if case == (name, groups))
    return hints.get(k, "count each group's distinct reads from outside and the values it must write")


# (graph, grouping, the word its error must contain, or None for legal)
LEGALITY_CASES = [
    ("SOFTMAX", [["e", "s"], ["p"]], None),
    ("CHAIN", [["t", "u", "y"]], None),
    ("SIBLINGS", [["a", "a2", "b", "b2"]], None),  # horizontal: unconnected chains of one shape
    ("MATMUL", [["p"], ["m", "t", "h"], ["m2", "y"]], None),  # matmul epilogues
    ("DIAMOND", [["a", "d"], ["b", "c"]], "cycle"),
    ("SOFTMAX", [["e", "p"], ["s"]], "cycle"),
    ("SOFTMAX", [["e", "s", "p"]], "mix"),  # an op after the reduction
    ("REDUCE", [["q", "s", "r"], ["y"]], "mix"),  # sqrt after the reduction, on the reduced shape
    ("MATMUL", [["p", "m"], ["t", "h"], ["m2", "y"]], "mix"),  # a matmul prologue
    ("MATMUL", [["p"], ["m", "t", "h", "m2", "y"]], "mix"),  # two matmuls
    ("CHAIN", [["t", "u"], ["u", "y"]], "duplicate"),  # u computed twice (recomputation is not allowed here)
    ("CHAIN", [["t", "u"]], "missing"),
    ("CHAIN", [["x", "t", "u", "y"]], "unknown"),  # an input in a group
]


@check(points=3)
def legality(student, rng, hidden):
    """check_fusion returns None for legal groupings and raises ValueError naming `groups` with the word for the
    violation (a cycle between groups, an op after a reduction, a matmul prologue, two matmuls, a node in two groups
    or in none, an input in a group)."""
    graphs = dict(_graphs(rng, hidden))
    for i, (name, groups, word) in enumerate(LEGALITY_CASES, 1):
        call = f"{'hidden case' if hidden else 'case'} {i}: check_fusion({name}, {groups})"
        got = student.call("refusal", graphs[name], groups, returns="any")
        if word is None:
            if got is not None:
                raise CheckFailure(f"{call} raised {shown(got[0] if isinstance(got, list) and got else got)}: the "
                                   "grouping is legal" + unredacted(f" ({got[1] if isinstance(got, list) else ''})"))
            continue
        if got is None:
            raise CheckFailure(f"{call} returned; it should raise ValueError: {_why(word)}")
        if not (isinstance(got, list) and len(got) == 2 and got[0] == "ValueError"):
            raise CheckFailure(f"{call} raised {shown(got[0] if isinstance(got, list) and got else got)}; it should "
                               f"raise ValueError: {_why(word)}")
        message = str(got[1])
        if not re.search(r"\bgroups\b", message) or word not in message.lower():
            raise CheckFailure(f"{call} raised ValueError, but its message should name `groups` and say {word!r}: "
                               f"{_why(word)}" + unredacted(f"; it says {message!r}"))


def _why(word):
    return {"cycle": "a path leaves a group and comes back into it, so no order runs the groups as kernels",
            "mix": "the group's ops cannot be one kernel (an op after a reduction, a matmul prologue or two matmuls)",
            "duplicate": "a node is in two groups", "missing": "a computed node is in no group",
            "unknown": "a group names a node that is not computed (an input)"}[word]


FUSE_GRAPHS = ["CHAIN", "DIAMOND", "SOFTMAX", "GATED_SOFTMAX", "REDUCE", "SIBLINGS", "MATMUL"]


@check(points=4)
def fusion_pass(student, rng, hidden):
    """fuse returns a legal grouping moving the fewest bytes (the exhaustive optimum) on graphs with a shared
    producer, a reduction boundary, siblings to fuse horizontally and a matmul epilogue; run group by group in the
    grader's numpy executor, it computes the graph's outputs."""
    for name, graph in _graphs(rng, hidden, FUSE_GRAPHS):
        groups = student.call("fuse", graph, returns="list")
        where = f"fuse({name})"
        try:
            fusion.check_fusion(graph, groups)
        except ValueError as error:
            raise CheckFailure(f"{where} is not a legal grouping: {str(error).removeprefix('groups: ')}"
                               + _fuse_hint(name)) from None
        best = fusion.optimal_fusion(graph)
        got, least = fusion.bytes_moved(graph, groups), fusion.bytes_moved(graph, best)
        if got > least:
            raise CheckFailure(f"{where} moves " + unredacted(f"{got} bytes, where the best legal grouping ({best}) "
                                                              f"moves {least}", "more bytes than the best legal "
                                                              "grouping") + "." + _fuse_hint(name))
        inputs = {n["name"]: rng.standard_normal(n["shape"]) for n in graph["nodes"] if n["op"] == "input"}
        outputs, truth = fusion.execute(graph, groups, inputs), ir.evaluate(graph, inputs)
        for o in truth:
            if not np.all(np.isfinite(outputs[o])):
                raise CheckFailure(f"{where}: run group by group, output {o} has NaN or infinity")
            # float64 numpy both ways, the same ops in the same order: equal but for rounding
            assert_close(outputs[o], truth[o], rtol=1e-12, atol=1e-12, where=f"output {o} of {where}, run group by "
                                                                             "group")


def _fuse_hint(name):
    return {"GATED_SOFTMAX": " e is read by the reduction s and by m: a group of e, g, m and p, with s outside, reads "
                             "x once but is a cycle (e -> s -> p); the legal groupings read x twice.",
            "SOFTMAX": " e has two consumers: fusing it with p and leaving the reduction s outside is a cycle.",
            "REDUCE": " Nothing fuses after a reduction: r and y are a kernel of their own.",
            "SIBLINGS": " The chains a -> a2 and b -> b2 both read x: one group of all four reads x once (horizontal "
                        "fusion); a pass that only merges a producer with its consumer misses it.",
            "MATMUL": " A matmul takes an epilogue only: p stays outside, m2 starts a group of its own.",
            "DIAMOND": " a is read by b and c, which meet again in d: one group of all four is legal."}.get(name, "")


# (graph, group): elementwise groups whose generated kernel runs in the grader's Triton interpreter
KERNEL_SHAPE = (5, 1531)  # 7655 elements: a ragged last block for any power-of-two BLOCK


@check(points=4)
def generated_kernel(student, rng, hidden):
    """The source generate_triton returns runs in the grader's Triton interpreter: run_fused's result matches numpy;
    it launches one kernel, which loads each value read once per element (a bias broadcast by column included) and
    stores each written value once: no intermediate reaches memory. Ragged sizes: a missing or wrong mask reads
    past an array's end, an error there."""
    M, N = (int(rng.integers(3, 7)), int(rng.integers(1025, 1600))) if hidden else KERNEL_SHAPE
    cases = [("CHAIN", chain(M, N), ["t", "u", "y"]),  # a bias of shape [N] broadcast over the rows
             ("SIBLINGS", siblings(M, N), ["a", "a2", "b", "b2"]),  # two outputs from one read of x
             ("CHAIN", chain(M, N), ["t", "u"])]  # u is read by y, outside the group: written
    for name, graph, group in cases:
        where = f"run_fused of generate_triton({name}, {group})"
        source = student.call("generate_triton", graph, group, returns="string")
        reads, writes = fusion.reads_and_writes(graph, group)
        by_name = ir.nodes_by_name(graph)
        arrays = [rng.standard_normal(by_name[r]["shape"]).astype(np.float32) for r in reads]
        got, launches = student.profiled_call("run_fused", *arrays, dialect="triton", returns="array",
                                              generated=source)
        inputs = dict(zip(reads, arrays))
        expected = np.stack([_value(graph, w, inputs) for w in writes])
        if got.shape != expected.shape:
            raise CheckFailure(f"{where} returned an array of shape {got.shape}; expected {expected.shape}: the "
                               f"{len(writes)} values written ({', '.join(writes)}), stacked")
        if not np.all(np.isfinite(got)):
            raise CheckFailure(f"{where} returned NaN or infinity")
        # float32 math against float64: a few ulps of float32 through erf and exp
        assert_close(got, expected, rtol=1e-5, atol=1e-5, where=where)
        n = M * N
        if len(launches) != 1:
            raise CheckFailure(f"{where} launched {len(launches)} kernels; the point of fusion is one")
        loaded, stored = launches[0]["loaded"] / n, launches[0]["stored"] / n
        if stored > len(writes):
            raise CheckFailure(f"{where} stores {stored:g} elements per element of the shape, but only "
                               f"{len(writes)} values ({', '.join(writes)}) are used outside the group: an "
                               "intermediate written to memory is what fusion exists to avoid")
        if loaded > len(reads):
            raise CheckFailure(f"{where} loads {loaded:g} elements per element of the shape, but the group reads "
                               f"{len(reads)} values ({', '.join(reads)}): load each once and keep it in a register")
        if stored < len(writes) or loaded < len(reads):
            raise CheckFailure(f"{where} loads {loaded:g} and stores {stored:g} elements per element of the shape: "
                               f"every element of {', '.join(reads)} is read, and of {', '.join(writes)} written")


def _value(graph, name, inputs):
    """The value of node `name` given the values `inputs` the group reads."""
    by_name = ir.nodes_by_name(graph)
    if name in inputs:
        return inputs[name]
    n = by_name[name]
    return ir.apply(n["op"], [_value(graph, i, inputs) for i in n["inputs"]])
