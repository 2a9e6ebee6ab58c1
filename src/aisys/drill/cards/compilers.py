"""Deep-learning compilers: graph breaks and what they cost, guards and recompiles, JIT against AOT, what AOTAutograd
does, what tracing misses, and the levels of IR from graph to instructions (book pages graphs-and-compilers and
torch-compile)."""

from ..card import Ask, Choice, Number, Several, card

PAGE = "04-autograd/torch-compile"
IR_PAGE = "04-autograd/graphs-and-compilers"
TOPIC = "autograd and compilers"


@card(topic=TOPIC, difficulty="easy", frequency="high", page=PAGE)
def graph_break_cost():
    options = ("the graphs on either side are compiled separately, so nothing fuses across the break and the values "
               "crossing it go through memory; Python runs in between",
               "the whole function falls back to eager mode for good",
               "the program computes a different result",
               "only compile time grows; the compiled code runs as fast")
    return Ask("A `print` in the middle of a function compiled with torch.compile causes a graph break. What does it "
               "cost at run time?",
               Choice(options, 0),
               "TorchDynamo ends the graph before the print, lets CPython run it, and starts a new graph after it. "
               "Each graph is optimised alone: an elementwise chain that was one fused kernel becomes two, the "
               "intermediate is written to memory and read back, and each call returns to the interpreter and checks "
               "a second set of guards. The result is unchanged; fullgraph=True turns breaks into errors.")


@card(topic=TOPIC, difficulty="medium", frequency="high", page=PAGE)
def graph_break_extra_traffic():
    tokens, hidden, element = 8192, 4096, 2  # bf16
    extra = 2 * tokens * hidden * element / 2**20
    return Ask(f"An elementwise chain on a bf16 tensor of {tokens} x {hidden} is one fused kernel under "
               "torch.compile. A graph break in the middle of the chain splits it in two kernels. How many extra "
               "MiB cross HBM per call because of the break?",
               Number(extra, rel=0.02, unit="MiB"),
               f"The intermediate at the break is written by the first kernel and read by the second: 2 x {tokens} x "
               f"{hidden} x {element} bytes = {extra:.0f} MiB, on top of the second launch.")


@card(topic=TOPIC, difficulty="medium", frequency="high", page=PAGE)
def guards_and_recompiles():
    options = ("calling it with a float `scale` that has a different value",
               "calling it with a tensor of another dtype",
               "calling it with a tensor of the same shape and new values",
               "calling it with a tensor of a new shape (the first time a shape changes)",
               "calling it again with everything as in the first call")
    return Ask("`f = torch.compile(g)` was first called as f(x, 2.0) with x a float32 tensor of shape (8, 16), and "
               "the Python float is used in g's arithmetic. Which later calls make TorchDynamo compile again (with "
               "default settings)?",
               Several(options, frozenset({0, 1, 3})),
               "Dynamo specialises on what it saw and guards each assumption: the tensor's dtype, device, shape and "
               "strides (TENSOR_MATCH) and the float's value (EQUALS_MATCH). New values in a tensor of the same "
               "kind pass every guard. A failed shape guard recompiles once with that dimension made symbolic, "
               "after which other sizes reuse the dynamic graph.")


@card(topic=TOPIC, difficulty="easy", frequency="high", page=IR_PAGE)
def jit_against_aot():
    options = ("JIT compiles at the first call with the real shapes and dtypes and pays compile time in the run; "
               "AOT compiles before the run into an artefact that needs no compiler (often no Python)",
               "JIT only works on CPUs; AOT only on GPUs",
               "AOT always produces faster code because it sees the whole program",
               "JIT means interpreted, AOT means compiled")
    return Ask("What distinguishes a just-in-time (torch.compile, jax.jit) from an ahead-of-time (torch.export + "
               "AOTInductor, TVM) deep-learning compiler?",
               Choice(options, 0),
               "A JIT specialises on what it sees at run time and caches the result, recompiling when a guard fails; "
               "it suits research code. AOT compiles for declared (possibly symbolic) shapes and ships a compiled "
               "module, what serving wants: no compile on the request path, a fixed memory plan.")


@card(topic=TOPIC, difficulty="medium", frequency="high", page=PAGE)
def what_aotautograd_does():
    options = ("it traces the forward and, through autograd, the backward into one joint ATen graph, then partitions "
               "it into a forward and a backward graph and chooses what the forward saves (or recomputes)",
               "it generates Triton kernels for the forward and backward",
               "it captures Python bytecode into an FX graph and installs guards",
               "it runs the backward pass ahead of the forward to save memory")
    return Ask("In torch.compile's pipeline (TorchDynamo -> AOTAutograd -> TorchInductor), what does AOTAutograd do?",
               Choice(options, 0),
               "AOTAutograd decomposes Dynamo's graph to functional ATen operators and traces autograd's derivative "
               "formulas into the same graph (inputs: primals and tangents). The min-cut partitioner splits it and "
               "may recompute cheap elementwise values in the backward instead of saving them. Dynamo captures the "
               "bytecode; Inductor writes the kernels.")


@card(topic=TOPIC, difficulty="medium", frequency="medium", page=IR_PAGE)
def tracing_misses_data_dependent_branch():
    options = ("it records only the branch the example input took, with a TracerWarning; other inputs silently get "
               "that branch",
               "it raises an error at trace time",
               "it records both branches and selects at run time",
               "it falls back to Python for the branch (a graph break)")
    return Ask("A function does `if x.norm() > 1.0: return x / x.norm()` else `return x`. What does torch.jit.trace "
               "(tracing with real example tensors) produce?",
               Choice(options, 0),
               "A tracer sees one execution. torch.jit.trace evaluates the condition on the example and records the "
               "operations that ran. torch.fx.symbolic_trace raises a TraceError instead (a proxy has no value for "
               "`if`); TorchDynamo breaks the graph; torch.cond or torch.where keep both branches in the graph.")


@card(topic=TOPIC, difficulty="hard", frequency="medium", page=IR_PAGE)
def ir_levels():
    options = ("StableHLO / Relax -> TIR or linalg on buffers -> LLVM IR",
               "LLVM IR -> TIR -> StableHLO",
               "TIR -> StableHLO -> PTX",
               "PTX -> TTGIR -> TTIR")
    return Ask("Which sequence goes from the highest-level IR to the lowest, as a deep-learning compiler lowers a "
               "model (graph of tensor operators -> loops or tiles -> instructions)?",
               Choice(options, 0),
               "Graph IRs (HLO/StableHLO, Relay/Relax, FX/ATen graphs, linalg on tensors) hold operators on whole "
               "tensors, where fusion is decided; loop or tile IRs (TVM's TIR, Inductor's loop IR, MLIR's scf/affine "
               "and linalg on buffers, Triton's TTIR and TTGIR) fix tiling and threads; LLVM IR and PTX hold "
               "instructions. Triton itself lowers TTIR -> TTGIR -> LLVM -> PTX.")
