"""Operator fusion: bytes an elementwise chain moves fused and unfused, horizontal fusion, why a grouping can be a
cycle, what may fuse with a reduction or a matmul, buffer reuse (aisys.graph.fusion, aisys.graph.passes)."""

from aisys.graph import fusion, ir, passes

from ..card import Ask, Choice, Number, card

PAGE = "04-autograd/graph-optimisation"
N = ir.node
MB = 10**6  # bytes in a megabyte


def _chain(M, K, ops):
    nodes, last = [N("x", "input", shape=[M, K])], "x"
    for k, op in enumerate(ops):
        nodes.append(N(f"v{k}", op, [last], [M, K]))
        last = f"v{k}"
    return {"nodes": nodes, "outputs": [last]}


@card(topic="autograd and compilers", difficulty="easy", frequency="high", page=PAGE)
def fused_chain_speedup():
    ops = ["exp", "tanh", "relu", "neg"]
    g = _chain(4096, 4096, ops)
    unfused = fusion.bytes_moved(g, [[f"v{k}"] for k in range(4)])
    ratio = unfused / fusion.bytes_moved(g, [[f"v{k}" for k in range(4)]])
    return Ask(
        "Four unary elementwise ops run one after another on a large fp32 tensor, each as its own kernel. Fused into "
        "one kernel, by what factor should the chain get faster on a GPU (memory-bound)?",
        Number(ratio, rel=0.02),
        f"Unfused, each kernel reads and writes the tensor: 4 x 2 = 8 passes. Fused, x is read once and the result "
        f"written once: 2 passes. Memory-bound time follows bytes: {ratio:g}x.")


@card(topic="autograd and compilers", difficulty="medium", frequency="high", page=PAGE)
def horizontal_fusion_bytes():
    M = K = 1024
    g = {"nodes": [N("x", "input", shape=[M, K]), N("a", "relu", ["x"], [M, K]), N("b", "sigmoid", ["x"], [M, K])],
         "outputs": ["a", "b"]}
    apart, together = fusion.bytes_moved(g, [["a"], ["b"]]), fusion.bytes_moved(g, [["a", "b"]])
    return Ask(
        f"a = relu(x) and b = sigmoid(x) are both outputs, x is {M} x {K} fp32. How many MB (1e6 bytes) does "
        "fusing them into one kernel (horizontal fusion) save?",
        Number((apart - together) / MB, rel=0.01),
        f"Apart, each kernel reads x and writes its output: {apart / MB:.2f} MB. Together, x is read once: "
        f"{together / MB:.2f} MB. The saving is one read of x, {(apart - together) / MB:.2f} MB.")


@card(topic="autograd and compilers", difficulty="medium", frequency="medium", page=PAGE)
def fusion_cycle():
    options = ("e must be written to memory anyway, so fusing saves nothing",
               "the group would have to run both before s (to produce e) and after it (to read s): a cycle",
               "exp and div cannot be in one Triton kernel",
               "s has a different dtype from e")
    return Ask("In softmax, e = exp(x - max) is read by s = sum(e) and by p = e / s. Why can e and p not be one "
               "kernel while s is a kernel of its own?", Choice(options, 1),
               "The groups must run in some order. The group {e, p} feeds s and reads s: a path leaves it and comes "
               "back, so no order exists. Legal: e with s, then p alone; or one kernel that does the whole row "
               "(a fused "
               "softmax, which needs the reduction's epilogue to fuse).")


@card(topic="autograd and compilers", difficulty="easy", frequency="high", page=PAGE)
def matmul_epilogue():
    options = ("the bias add and activation after a matmul (an epilogue)",
               "an elementwise op on the matmul's input (a prologue), always",
               "a second matmul that reads the first's output",
               "nothing: matmuls are never fused")
    return Ask("Which fusion with a matmul do TorchInductor and XLA do by default, and the rule of aisys.graph.fusion "
               "allows?", Choice(options, 0),
               "The epilogue runs on the accumulator tile while it is still in registers, before the store: the "
               "output never goes through memory twice. A prologue would be recomputed for every tile that reads "
               "its input, and two matmuls need their own tiling.")


@card(topic="autograd and compilers", difficulty="medium", frequency="medium", page=PAGE)
def buffer_reuse_peak():
    M = K = 1024
    g = _chain(M, K, ["exp"] * 6)
    peak, naive = passes.peak_memory(g, reuse=True), passes.peak_memory(g, reuse=False)
    return Ask(
        f"Six elementwise ops in a chain on a {M} x {K} fp32 input, each its own kernel, each output read only by "
        "the next. With buffers freed after their last reader, what is the peak memory in MB (1e6 bytes), input "
        "included?",
        Number(peak / MB, rel=0.01),
        f"At any kernel, the input x, the value being read and the value being written are live: 3 x "
        f"{4 * M * K / MB:.2f} MB = {peak / MB:.2f} MB. Without reuse all 7 buffers stay: {naive / MB:.2f} MB.")


@card(topic="autograd and compilers", difficulty="hard", frequency="medium", page=PAGE)
def greedy_fusion_stops_short():
    M = K = 1024
    g = {"nodes": [N("x", "input", shape=[M, K]), N("e", "exp", ["x"], [M, K]), N("s", "sum", ["e"], [M, 1]),
                   N("g", "sigmoid", ["x"], [M, K]), N("m", "mul", ["e", "g"], [M, K]),
                   N("p", "div", ["m", "s"], [M, K])], "outputs": ["p"]}
    extra = fusion.bytes_moved(g, fusion.greedy_fusion(g)) - fusion.bytes_moved(g, fusion.optimal_fusion(g))
    return Ask(
        "e = exp(x) feeds s = sum(e) and m = e * sigmoid(x); p = m / s. A greedy pass merges the legal pair of "
        "groups that saves most bytes first. With x 1024 x 1024 fp32, how many MB (1e6 bytes) more than the "
        "optimum does greedy move (rule: reductions fuse with producers only)?",
        Number(extra / MB, rel=0.01),
        "Greedy first merges e, sigmoid and m (reads x once); then s must read e back and p reads m and s, and "
        "no merge is legal. The optimum fuses e into the reduction s (writing e once), and g, m, p into one kernel "
        "that reads x and e: "
        f"{extra / MB:.2f} MB less.")
