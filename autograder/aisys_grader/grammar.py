"""The dialects the clean room runs: which Python a student's kernels and rank functions may be written in.

A check that grades how code runs (a kernel's launch reports, the messages a rank posted) runs
the student's definitions again in the grader's clean room (cleanroom.py), from their source.
A definition runs there only if it passes its dialect's grammar, an allowlist that denies by
default:

- statements: `def` (decorated only by `cuda.jit` or `functools.cache`/`lru_cache`), assignment
  to names and subscripts, `if`/`for`/`while`/`break`/`continue`/`return`/`pass`, `raise`,
  `try`, `assert`, `del` of names and subscripts; no `class`, `with`, `global`, `yield`,
  `async`/`await`, and imports only at the top of a cell, of the dialect's modules, no `*`;
- expressions: arithmetic, comparisons, boolean logic, indexing and slicing, tuples, lists,
  dicts, sets, comprehensions, lambdas, calls, f-strings;
- names: never starting with `_` (so no dunders); builtins only from `BUILTINS` (no getattr,
  eval, open, type, ...); a module's name only as `module.name` with `module.name` in the
  dialect's `paths` (`np.zeros`, `cuda.threadIdx.x`, `dist.isend`), never rebound;
- attributes of values (an array's `.shape`, a tensor's `.copy_`) only from the dialect's
  `attributes`, and never assigned or deleted.

Every other top-level statement of a cell (a call, a loop, a `with simt.profile()` demo) is not
a definition and is left out. `read` turns cells into the definitions to run and the refusals
to report, each refusal naming the line, the construct and why.
"""

import ast
import builtins
import math
import string
from dataclasses import dataclass, field

BUILTINS = frozenset({
    "abs", "all", "any", "bin", "bool", "callable", "chr", "complex", "dict", "divmod", "enumerate", "filter",
    "float", "frozenset", "hex", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min",
    "next", "oct", "ord", "pow", "print", "range", "repr", "reversed", "round", "set", "slice", "sorted", "str",
    "sum", "tuple", "zip", "Ellipsis", "NotImplemented",
    "ArithmeticError", "AssertionError", "Exception", "IndexError", "KeyError", "LookupError",
    "NotImplementedError", "OverflowError", "RuntimeError", "StopIteration", "TypeError", "ValueError",
    "ZeroDivisionError",
})

NUMPY = (  # numpy.<name> usable as values: dtypes, constants, array functions; no file, pointer or stride tricks
    "float16 float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 uint64 bool_ intp dtype iinfo finfo "
    "ndarray inf nan pi e newaxis "
    "zeros zeros_like empty empty_like ones ones_like full full_like arange linspace array asarray "
    "ascontiguousarray copy eye identity reshape ravel concatenate stack hstack vstack split array_split repeat "
    "tile flip roll transpose swapaxes expand_dims squeeze pad where nonzero argwhere sum prod cumsum cumprod "
    "diff max min amax amin maximum minimum abs absolute sqrt exp log log2 log10 ceil floor round clip mod "
    "floor_divide add subtract multiply divide power dot matmul einsum mean var std sign isfinite isnan isinf "
    "allclose isclose array_equal all any count_nonzero argmax argmin argsort sort lexsort searchsorted bincount "
    "unique histogram left_shift right_shift bitwise_and bitwise_or bitwise_xor logical_and logical_or "
    "logical_not random.default_rng isneginf isposinf promote_types result_type logaddexp tril triu outer "
    "broadcast_to nan_to_num exp2 expm1 log1p"
).split()

CUDA = (  # aisys.simt.cuda: numba's kernel-side intrinsics and host API, as the simulator implements them
    "threadIdx.x threadIdx.y threadIdx.z blockIdx.x blockIdx.y blockIdx.z blockDim.x blockDim.y blockDim.z "
    "gridDim.x gridDim.y gridDim.z threadIdx blockIdx blockDim gridDim warpsize laneid "
    "shared.array local.array const.array_like grid gridsize jit "
    "atomic.add atomic.sub atomic.max atomic.min atomic.exch atomic.and_ atomic.or_ atomic.xor atomic.inc "
    "atomic.dec atomic.cas atomic.compare_and_swap "
    "shfl_sync shfl_up_sync shfl_down_sync shfl_xor_sync all_sync any_sync eq_sync ballot_sync "
    "syncthreads syncthreads_count syncthreads_and syncthreads_or syncwarp activemask "
    "threadfence threadfence_block threadfence_system "
    "to_device device_array device_array_like synchronize"
).split()

TORCH = (  # torch.<name>: tensor factories and functions, dtypes; no load, ops, from_file, storage or _C
    "tensor as_tensor from_numpy empty empty_like zeros zeros_like ones ones_like full full_like arange linspace "
    "cat concat stack split chunk narrow tensor_split argsort sort bincount cumsum repeat_interleave equal "
    "allclose where nonzero unique clamp minimum maximum sum prod max min abs eq ne lt le gt ge index_select "
    "gather scatter searchsorted bucketize topk flip roll div floor_divide remainder count_nonzero numel "
    "Tensor Size device float16 float32 float64 bfloat16 half float double int8 int16 int32 int64 uint8 bool "
    "long int short"
).split()

DISTRIBUTED = (  # torch.distributed: point-to-point messages, and the collectives, which the recorder refuses
    "send recv isend irecv batch_isend_irecv P2POp get_rank get_world_size "
    "ReduceOp.SUM ReduceOp.MAX ReduceOp.MIN ReduceOp.PRODUCT "
    "all_reduce broadcast reduce all_gather all_gather_into_tensor reduce_scatter reduce_scatter_tensor "
    "all_to_all all_to_all_single gather scatter barrier"
).split()

TRAINING = (  # torch.<name> a rank's training step computes with: autograd's math, optimizers' arithmetic
    "matmul mm bmm outer einsum exp log tanh erf sqrt rsqrt sigmoid relu softmax log_softmax square mean var "
    "isfinite isnan isinf all any tril triu ones_like randn manual_seed "
    "nn.functional.gelu nn.functional.relu nn.functional.softmax nn.functional.log_softmax nn.functional.linear "
    "nn.functional.layer_norm nn.functional.cross_entropy nn.functional.mse_loss "
    "nn.functional.scaled_dot_product_attention"
).split()

TRAINING_VALUES = (  # tensors in a training step: autograd (its hooks, .grad read), in-place optimizer arithmetic
    "grad requires_grad requires_grad_ retain_grad is_leaf register_hook register_post_accumulate_grad_hook "
    "backward detach view view_as reshape_as flatten unflatten matmul exp log sqrt rsqrt pow square neg abs mean "
    "var norm tanh sigmoid softmax tril triu isfinite isnan isinf addcmul_ addcdiv_ lerp_ sqrt_ exp_ neg_ abs_ "
    "pow_ copy_ masked_fill_ remove"
).split()

TRITON_LANGUAGE = (  # triton.language.<name>: what kernels compute with; no inline assembly
    "abs add arange argmax argmin associative_scan atomic_add atomic_and atomic_cas atomic_max atomic_min atomic_or "
    "atomic_xchg atomic_xor bfloat16 broadcast broadcast_to cast cat cdiv ceil clamp constexpr cos cumprod cumsum "
    "device_assert device_print div_rn dot erf exp exp2 expand_dims fdiv flip float16 float32 float64 floor fma full "
    "gather histogram int1 int16 int32 int64 int8 interleave join load log log2 make_block_ptr max max_constancy "
    "max_contiguous maximum min minimum mul multiple_of num_programs permute program_id range ravel reduce reshape "
    "rsqrt sigmoid sin softmax sort split sqrt sqrt_rn squeeze static_assert static_print static_range store sub sum "
    "swizzle2d topk trans uint16 uint32 uint64 uint8 umulhi unsqueeze view where xor_sum zeros zeros_like "
    "math.abs math.ceil math.cos math.div_rn math.erf math.exp math.exp2 math.fdiv math.floor math.fma math.log "
    "math.log2 math.rsqrt math.sin math.sqrt math.sqrt_rn math.umulhi"
).split()

TRITON_HOST = (  # triton.<name>, aisys.tensors and aisys.device: launching kernels on the data the checks give;
    # torch's own math, so that a host function computing with torch instead of a kernel is graded, not refused
    "triton.jit triton.cdiv triton.next_power_of_2 triton.Config "
    "torch.softmax torch.exp torch.log torch.erf torch.tanh torch.sqrt torch.rsqrt torch.matmul torch.randn "
    "torch.nn.functional.gelu torch.nn.functional.layer_norm torch.nn.functional.rms_norm "
    "torch.nn.functional.softmax torch.nn.functional.scaled_dot_product_attention "
    "aisys.tensors.to_device aisys.tensors.to_numpy aisys.tensors.TORCH_DTYPES "
    "aisys.device.current aisys.device.describe aisys.device.use_triton_interpreter"
).split()

COMMON = (  # attributes of values in both dialects: containers, strings, numbers, numpy arrays and generators
    "append extend insert pop index count items keys values get setdefault update clear add discard "
    "join strip startswith endswith replace lower upper "
    "bit_length real imag conjugate is_integer "
    "shape size ndim dtype itemsize nbytes T astype copy reshape ravel flatten view fill sum max min mean prod "
    "cumsum argmax argmin argsort sort tolist item any all nonzero transpose swapaxes clip round dot squeeze "
    "repeat type kind name eps bits tiny "
    "integers random standard_normal normal uniform choice permutation"
).split()

SIMT_VALUES = "copy_to_host copy_to_device x y z".split()  # device arrays; cuda.threadIdx and the like

TENSOR_VALUES = (  # torch tensors, dtypes, and the requests isend/irecv return
    "device numel element_size dim clone copy_ zero_ fill_ add_ sub_ mul_ div_ add sub mul div narrow chunk "
    "split unbind contiguous new_empty new_zeros new_full new_ones new_tensor to float double long int half bool "
    "index_select index_add_ index_copy_ index_fill_ scatter_ scatter_add_ gather masked_fill masked_fill_ flip "
    "roll t permute unsqueeze expand expand_as repeat_interleave eq ne lt gt le ge clamp clamp_ is_contiguous "
    "is_floating_point numpy values indices bincount topk tensor_split floor_divide remainder "
    "wait is_completed"
).split()

KERNEL_VALUES = "stride element_ty cpu detach trans broadcast_to expand_dims cast".split()  # tensors, kernels' blocks

DECORATORS = {"aisys.simt.cuda.jit": "cuda.jit", "functools.cache": "functools.cache",
              "functools.lru_cache": "functools.lru_cache", "triton.jit": "triton.jit"}  # as a message shows them
FUNCTOOLS = ["functools.cache", "functools.lru_cache", "functools.reduce", "functools.partial"]
MATH = [f"math.{name}" for name in dir(math) if not name.startswith("_")]


@dataclass(frozen=True)
class Dialect:
    """What a dialect allows beyond the shared statements and expressions (see the module docstring)."""

    name: str
    runs: str  # who runs it, for messages: "the grader's simulator"
    modules: frozenset  # modules an import may name
    paths: frozenset  # dotted names usable as values, under those modules
    attributes: frozenset  # attribute names allowed on any value
    decorators: frozenset  # paths a `def` may be decorated with (or called with arguments, then decorate)
    namespaces: frozenset = field(init=False)  # every proper prefix of a path: `numpy.random`, `aisys.simt.cuda`

    def __post_init__(self):
        prefixes = {".".join(p.split(".")[:i]) for p in self.paths for i in range(1, p.count(".") + 1)}
        object.__setattr__(self, "namespaces", frozenset(prefixes))


SIMT = Dialect(
    "simt", "the grader's simulator",
    modules=frozenset({"numpy", "math", "functools", "aisys.simt"}),
    paths=frozenset([f"numpy.{n}" for n in NUMPY] + [f"aisys.simt.cuda.{n}" for n in CUDA] + FUNCTOOLS + MATH),
    attributes=frozenset(COMMON + SIMT_VALUES),
    decorators=frozenset({"aisys.simt.cuda.jit", "functools.cache", "functools.lru_cache"}))

RANKS = Dialect(
    "ranks", "the grader's ranks",
    modules=frozenset({"numpy", "math", "functools", "torch", "torch.distributed", "torch.nn.functional"}),
    paths=frozenset([f"numpy.{n}" for n in NUMPY] + [f"torch.{n}" for n in TORCH + TRAINING]
                    + [f"torch.distributed.{n}" for n in DISTRIBUTED] + FUNCTOOLS + MATH),
    attributes=frozenset(COMMON + TENSOR_VALUES + TRAINING_VALUES),
    decorators=frozenset({"functools.cache", "functools.lru_cache"}))

TRACED = Dialect(  # numpy code whose memory and calls a check measures (cleanroom: the "traced" dialect)
    "traced", "the grader's tracer",
    modules=frozenset({"numpy", "math", "functools"}),
    paths=frozenset([f"numpy.{n}" for n in NUMPY] + FUNCTOOLS + MATH),
    attributes=frozenset(COMMON),
    decorators=frozenset({"functools.cache", "functools.lru_cache"}))

TRITON = Dialect(
    "triton", "the grader's Triton interpreter",
    modules=frozenset({"numpy", "math", "functools", "torch", "torch.nn.functional", "triton", "triton.language"}),
    paths=frozenset([f"numpy.{n}" for n in NUMPY] + [f"torch.{n}" for n in TORCH] + TRITON_HOST
                    + [f"triton.language.{n}" for n in TRITON_LANGUAGE] + FUNCTOOLS + MATH),
    attributes=frozenset(COMMON + TENSOR_VALUES + KERNEL_VALUES),
    decorators=frozenset({"triton.jit", "functools.cache", "functools.lru_cache"}))

DIALECTS = {d.name: d for d in (SIMT, RANKS, TRACED, TRITON)}


@dataclass(frozen=True)
class Refusal:
    """Why a definition is not run: the line of its cell, the construct there, and why."""

    line: int
    construct: str
    why: str

    def __str__(self):
        return f"line {self.line} of its cell uses `{self.construct}`: {self.why}"


@dataclass
class Definition:
    """One top-level definition of a cell: the names it binds, and either the statement to run or a refusal.
    A cell that does not parse is one Definition that binds nothing, refused."""

    cell: int  # its index in the sources given
    line: int
    names: list[str]
    statement: ast.stmt | None = None
    imports: list[tuple[str, str]] = field(default_factory=list)  # (name, dotted path) an import binds
    refusal: Refusal | None = None


class _Refused(Exception):
    def __init__(self, node: ast.AST, why: str):
        self.node, self.why = node, why


def _names_bound(statement: ast.stmt) -> list[str]:
    """The names a top-level statement binds in the namespace."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [statement.name]
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name.split(".")[0]) for a in statement.names if a.name != "*"]
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _is_definition(statement: ast.stmt) -> bool:
    """Definitions are kept (run or refused); every other top-level statement is left out."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
        return True
    if isinstance(statement, ast.Assign):
        return all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Starred, ast.Store))
                   for t in statement.targets for n in ast.walk(t))
    if isinstance(statement, ast.AnnAssign):
        return statement.value is not None and isinstance(statement.target, ast.Name)
    return isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name)


def read(sources: list[str], dialect: Dialect, modules=()) -> list[Definition]:
    """The definitions of cells run in order: each either to run, or refused saying why.

    `modules` adds importable modules (an exercise's `clean_room`); their names are usable
    only where the dialect's paths list them. A cell that does not parse binds nothing.
    """
    allowed = dialect.modules | set(modules)
    parsed, unreadable = [], []
    for cell, source in enumerate(sources):
        try:
            tree = _parse(source)
        except (SyntaxError, ValueError) as error:
            line = getattr(error, "lineno", None) or 1
            unreadable.append(Definition(cell, line, [], refusal=Refusal(line, _line(source, line), f"{error.msg}"
                                                                   if isinstance(error, SyntaxError) else str(error))))
            continue
        parsed += [(cell, source, s) for s in tree.body if _is_definition(s)]
    definitions, roots = [], {}
    for cell, source, statement in parsed:  # imports first: a name bound by an import means that module everywhere
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            definitions.append(_import(cell, source, statement, dialect, allowed, roots))
    defined = {n for _, _, s in parsed for n in _names_bound(s)}
    imported = iter(definitions)
    out = []
    for cell, source, statement in parsed:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            out.append(next(imported))
            continue
        definition = Definition(cell, statement.lineno, _names_bound(statement), statement)
        try:
            _Grammar(dialect, roots, defined).check_top(statement)
        except _Refused as refused:
            definition.statement = None
            definition.refusal = Refusal(refused.node.lineno, _text(source, refused.node), refused.why)
        out.append(definition)
    return unreadable + out


def _parse(source: str) -> ast.Module:
    """A cell's syntax tree; IPython's magics (`%timeit`, `!ls`) are read as IPython runs them, as calls."""
    try:
        return ast.parse(source)
    except SyntaxError:
        pass
    from IPython.core.inputtransformer2 import TransformerManager  # wherever notebooks run, IPython is there

    return ast.parse(TransformerManager().transform_cell(source))


def _line(source: str, number: int) -> str:
    lines = source.splitlines()
    text = lines[number - 1].strip() if 0 < number <= len(lines) else ""
    return text if len(text) <= 60 else text[:57] + "..."


def _text(source: str, node: ast.AST) -> str:
    text = ast.get_source_segment(source, node) or ast.unparse(node)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _import(cell, source, statement, dialect, allowed, roots) -> Definition:
    """An import binds names to modules or to paths of the dialect; anything else is refused."""
    definition = Definition(cell, statement.lineno, _names_bound(statement))

    def refuse(why):
        definition.refusal = Refusal(statement.lineno, _text(source, statement), why)
        return definition

    bindings = []
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            if alias.name not in allowed:
                return refuse(f"the grader runs only imports of {_listed(allowed)} in {dialect.runs}")
            bindings.append((alias.asname, alias.name) if alias.asname else (alias.name.split(".")[0],
                                                                            alias.name.split(".")[0]))
    else:
        module = statement.module or ""
        if statement.level or not (module in allowed or module in dialect.namespaces
                                   or any(m.startswith(f"{module}.") for m in allowed)):
            return refuse(f"the grader runs only imports of {_listed(allowed)} in {dialect.runs}")
        for alias in statement.names:
            path = f"{module}.{alias.name}"
            if alias.name == "*":
                return refuse("`import *` hides which names a cell uses; import the names themselves")
            if not (path in allowed or path in dialect.paths or path in dialect.namespaces):
                return refuse(f"`{path}` is not part of the dialect {dialect.runs} runs")
            bindings.append((alias.asname or alias.name, path))
    for name, path in bindings:
        if name.startswith("_"):
            return refuse("names starting with `_` are not part of the dialect")
        if roots.get(name, path) != path:
            return refuse(f"`{name}` already names `{roots[name]}`; give this import another name")
    for name, path in bindings:
        roots[name] = path
    definition.imports = bindings
    return definition


def _listed(modules) -> str:
    return ", ".join(f"`{m}`" for m in sorted(modules))


class _Grammar(ast.NodeVisitor):
    """Walks one top-level definition; raises _Refused at the first construct outside the dialect."""

    STATEMENTS = (ast.FunctionDef, ast.Return, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.While, ast.If,
                  ast.Raise, ast.Try, ast.Assert, ast.Expr, ast.Pass, ast.Break, ast.Continue, ast.Delete,
                  ast.Nonlocal)
    EXPRESSIONS = (ast.BoolOp, ast.NamedExpr, ast.BinOp, ast.UnaryOp, ast.Lambda, ast.IfExp, ast.Dict, ast.Set,
                   ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Compare, ast.Call,
                   ast.FormattedValue, ast.JoinedStr, ast.Constant, ast.Attribute, ast.Subscript, ast.Starred,
                   ast.Name, ast.List, ast.Tuple, ast.Slice)
    PARTS = (ast.comprehension, ast.arguments, ast.arg, ast.keyword, ast.ExceptHandler, ast.expr_context,
             ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
    WHY = {
        ast.ClassDef: "classes are not part of the dialect: write functions",
        ast.AsyncFunctionDef: "`async` is not part of the dialect",
        ast.Await: "`await` is not part of the dialect",
        ast.AsyncFor: "`async` is not part of the dialect",
        ast.AsyncWith: "`async` is not part of the dialect",
        ast.With: "`with` is not part of the dialect: the grader decides what is profiled and recorded",
        ast.Yield: "generators (`yield`) are not part of the dialect",
        ast.YieldFrom: "generators (`yield`) are not part of the dialect",
        ast.Global: "`global` is not part of the dialect: return values instead",
        ast.Import: "imports belong at the top of a cell, not inside a function",
        ast.ImportFrom: "imports belong at the top of a cell, not inside a function",
    }

    def __init__(self, dialect: Dialect, roots: dict[str, str], defined: set[str]):
        self.dialect, self.roots, self.defined = dialect, roots, defined
        self.bound: set[str] = set()

    def check_top(self, statement: ast.stmt) -> None:
        self.bound = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        self.bound |= {n.arg for n in ast.walk(statement) if isinstance(n, ast.arg)}
        self.bound |= {n.name for n in ast.walk(statement) if isinstance(n, (ast.FunctionDef, ast.ExceptHandler))
                       and n.name}
        self.visit(statement)

    def generic_visit(self, node):
        if not isinstance(node, self.STATEMENTS + self.EXPRESSIONS + self.PARTS):
            raise _Refused(node, self.WHY.get(type(node), f"`{type(node).__name__}` is not part of the dialect"))
        super().generic_visit(node)

    # names ------------------------------------------------------------------------------------------------
    def _name(self, node, name: str, binds: bool) -> None:
        if name.startswith("_") and name != "_":  # `for _ in ...` is fine: a name, not an attribute
            raise _Refused(node, f"names starting with `_` are not part of the dialect {self.dialect.runs} runs")
        if name in self.roots and binds:
            raise _Refused(node, f"`{name}` names `{self.roots[name]}` in your notebook; give this variable another "
                                 "name")

    def visit_Name(self, node):
        binds = not isinstance(node.ctx, ast.Load)
        self._name(node, node.id, binds)
        if binds:
            return
        if node.id in self.roots and self.roots[node.id] not in self.dialect.paths:
            raise _Refused(node, f"`{node.id}` is a module here: use its functions, as `{node.id}.<name>`")
        if (hasattr(builtins, node.id) and node.id not in BUILTINS and node.id not in self.bound
                and node.id not in self.defined and node.id not in self.roots):
            raise _Refused(node, f"the builtin `{node.id}` is not part of the dialect {self.dialect.runs} runs")

    def visit_arg(self, node):
        self._name(node, node.arg, binds=True)
        if node.annotation is not None:
            self.visit(node.annotation)

    def visit_keyword(self, node):
        if node.arg is not None and node.arg.startswith("_"):
            raise _Refused(node.value, f"names starting with `_` are not part of the dialect {self.dialect.runs} runs")
        self.visit(node.value)

    def visit_ExceptHandler(self, node):
        if node.name:
            self._name(node, node.name, binds=True)
        self.generic_visit(node)

    def visit_Nonlocal(self, node):
        for name in node.names:
            self._name(node, name, binds=False)

    def visit_Delete(self, node):
        for target in node.targets:
            if not isinstance(target, (ast.Name, ast.Subscript)):
                raise _Refused(target, "only names and elements can be deleted")
        self.generic_visit(node)

    # definitions ------------------------------------------------------------------------------------------
    def visit_FunctionDef(self, node):
        self._name(node, node.name, binds=True)
        for decorator in node.decorator_list:
            called = decorator.func if isinstance(decorator, ast.Call) else decorator
            if self._path(called) not in self.dialect.decorators:
                allowed = ", ".join(f"`@{DECORATORS[p]}`" for p in sorted(self.dialect.decorators))
                raise _Refused(decorator, f"the dialect allows only the decorators {allowed}")
            self.visit(decorator)
        self.visit(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        for statement in node.body:
            self.visit(statement)

    def _path(self, node) -> str | None:
        """The dotted path an expression names through an import (`cuda.jit` -> 'aisys.simt.cuda.jit'), if any."""
        attributes = []
        while isinstance(node, ast.Attribute):
            attributes.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.roots:
            return ".".join([self.roots[node.id], *reversed(attributes)])
        return None

    # attributes -------------------------------------------------------------------------------------------
    def visit_Attribute(self, node):
        if not isinstance(node.ctx, ast.Load):
            raise _Refused(node, "assigning to or deleting an attribute is not part of the dialect")
        chain, base = [], node
        while isinstance(base, ast.Attribute):
            chain.append(base)
            base = base.value
        chain.reverse()  # innermost first: np.random, then np.random.default_rng
        for link in chain:
            if link.attr.startswith("_"):
                raise _Refused(link, f"names starting with `_` are not part of the dialect {self.dialect.runs} runs")
        if isinstance(base, ast.Name) and base.id in self.roots:
            self._name(base, base.id, binds=False)
            path, shown = self.roots[base.id], base.id
            while chain:
                candidate = f"{path}.{chain[0].attr}"
                if candidate not in self.dialect.paths and candidate not in self.dialect.namespaces:
                    if path in self.dialect.paths:
                        break  # a value: the rest are its attributes
                    raise _Refused(chain[0], f"`{shown}.{chain[0].attr}` is not part of the dialect "
                                             f"{self.dialect.runs} runs")
                path, shown = candidate, f"{shown}.{chain[0].attr}"
                chain.pop(0)
            if not chain and path not in self.dialect.paths:
                raise _Refused(node, f"`{shown}` is a module here: use its functions, as `{shown}.<name>`")
        else:
            self.visit(base)
        for link in chain:
            if link.attr == "format" and link is chain[0] and _plain_format(base):
                continue  # "{} of {}".format(a, b): fields that look nothing up
            if link.attr in ("format", "format_map"):
                raise _Refused(link, f"`.{link.attr}` can look up attributes (`{{0.__class__}}`): the dialect allows "
                                     "`.format` only on a string literal whose fields are `{}`, `{0}` or `{name}`; "
                                     "an f-string does the same")
            if link.attr not in self.dialect.attributes:
                raise _Refused(link, f"the attribute `.{link.attr}` is not part of the dialect {self.dialect.runs} "
                                     "runs")


def _plain_format(node: ast.expr) -> bool:
    """A string literal whose format fields are positions or names only: "{0.__class__}" looks up an attribute."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return False
    try:
        fields = [f for _, f, spec, _ in string.Formatter().parse(node.value) if f is not None]
        specs = [spec for _, f, spec, _ in string.Formatter().parse(node.value) if spec]
    except ValueError:
        return False
    return not any(c in f for f in fields + specs for c in ".[{")
