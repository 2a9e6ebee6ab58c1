"""Rewrite a kernel's source so that the simulator sees every array access and every branch.

    a[i]            ->  _ld(a, i, SITE)          a load, recorded when `a` is a simulated array
    a[i] = v        ->  _st(a, i, v, SITE)       a store
    a[i] += v       ->  _st(a, i, _ld(a, i, S1) + v, S2)
    if c: / while c:  ->  if _br(c, SITE): / while _br(c, SITE):
    for x in it:    ->  for x in _loop(it, SITE):

SITE is a number standing for one place in the source (line and access), so the
simulator can group the accesses of a warp's lanes into one warp-level instruction,
as the hardware does. Line numbers are kept, so tracebacks point at the student's code.
"""

import ast
import inspect
import textwrap
import types
from dataclasses import dataclass

HELPERS = ("_aisys_ld", "_aisys_st", "_aisys_br", "_aisys_loop")


class SourceError(ValueError):
    """The kernel's source cannot be simulated as written."""


@dataclass(frozen=True)
class Site:
    kernel: str
    line: int
    kind: str  # "load", "store", "branch"
    source: str


SITES: list[Site] = []  # every site of every instrumented function; a site's number is its index


def _new_site(kernel: str, line: int, kind: str, lines: dict[int, str]) -> ast.Constant:
    SITES.append(Site(kernel, line, kind, lines.get(line, "").strip()))
    return ast.Constant(len(SITES) - 1)


def _call(name: str, *args) -> ast.Call:
    return ast.Call(ast.Name(name, ast.Load()), list(args), [])


def _index(node: ast.Subscript):
    """The index expression of a subscript, as an expression (a tuple stays a tuple)."""
    if isinstance(node.slice, ast.Slice) or (isinstance(node.slice, ast.Tuple)
                                             and any(isinstance(e, ast.Slice) for e in node.slice.elts)):
        raise SourceError(f"line {node.lineno}: slicing (`:`) inside a kernel is not supported by the simulator; "
                          "index single elements, a[i] or a[i, j]")
    return node.slice


class _Instrument(ast.NodeTransformer):
    def __init__(self, kernel: str, lines: dict[int, str], local_names: set[str]):
        self.kernel, self.lines, self.local_names = kernel, lines, local_names
        self.temps = 0

    def _site(self, node, kind):
        return _new_site(self.kernel, node.lineno, kind, self.lines)

    def _temp(self) -> str:
        self.temps += 1
        return f"_aisys_t{self.temps}"

    # loads and stores -------------------------------------------------------------------------
    def visit_Subscript(self, node):
        node = self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        return ast.copy_location(_call("_aisys_ld", node.value, _index(node), self._site(node, "load")), node)

    def _store(self, target: ast.Subscript, value: ast.expr) -> ast.stmt:
        target_value = self.visit(target.value)
        index = self.visit(_index(target))
        call = _call("_aisys_st", target_value, index, value, self._site(target, "store"))
        return ast.copy_location(ast.Expr(call), target)

    def _has_subscript(self, target) -> bool:
        return any(isinstance(n, ast.Subscript) for n in ast.walk(target))

    def _replace_subscripts(self, target, stores: list):
        """Target with each subscript replaced by a temporary; the stores to make afterwards."""
        if isinstance(target, ast.Subscript):
            name = self._temp()
            stores.append(self._store(target, ast.Name(name, ast.Load())))
            return ast.Name(name, ast.Store())
        if isinstance(target, (ast.Tuple, ast.List)):
            target.elts = [self._replace_subscripts(e, stores) for e in target.elts]
        elif isinstance(target, ast.Starred):
            target.value = self._replace_subscripts(target.value, stores)
        return target

    def visit_Assign(self, node):
        value = self.visit(node.value)
        if not any(self._has_subscript(t) for t in node.targets):
            node.value = value
            return node
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
            return self._store(node.targets[0], value)
        # a[i], a[j] = a[j], a[i] and the like: evaluate the value once, unpack into temporaries, store each
        held = self._temp()
        out = [ast.Assign([ast.Name(held, ast.Store())], value)]
        for target in node.targets:
            stores = []
            plain_target = self._replace_subscripts(target, stores)
            out.append(ast.Assign([plain_target], ast.Name(held, ast.Load())))
            out.extend(stores)
        return [ast.copy_location(s, node) for s in out]

    def visit_AnnAssign(self, node):
        if isinstance(node.target, ast.Subscript) and node.value is not None:
            return self._store(node.target, self.visit(node.value))
        return self.generic_visit(node)

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Subscript):
            return self.generic_visit(node)
        array, index = self._temp(), self._temp()
        value = self.visit(node.value)
        target = node.target
        load = _call("_aisys_ld", ast.Name(array, ast.Load()), ast.Name(index, ast.Load()), self._site(target, "load"))
        store = _call("_aisys_st", ast.Name(array, ast.Load()), ast.Name(index, ast.Load()),
                      ast.BinOp(load, node.op, value), self._site(target, "store"))
        out = [ast.Assign([ast.Name(array, ast.Store())], self.visit(target.value)),
               ast.Assign([ast.Name(index, ast.Store())], self.visit(_index(target))),
               ast.Expr(store)]
        return [ast.copy_location(s, node) for s in out]

    def visit_Delete(self, node):
        raise SourceError(f"line {node.lineno}: `del` inside a kernel is not supported")

    # branches ---------------------------------------------------------------------------------
    def visit_If(self, node):
        node = self.generic_visit(node)
        node.test = ast.copy_location(_call("_aisys_br", node.test, self._site(node, "branch")), node.test)
        return node

    visit_While = visit_If

    def visit_For(self, node):
        if self._has_subscript(node.target):
            raise SourceError(f"line {node.lineno}: a loop variable cannot be an array element")
        node = self.generic_visit(node)
        node.iter = ast.copy_location(_call("_aisys_loop", node.iter, self._site(node, "branch")), node.iter)
        return node

    # compile-time sizes -----------------------------------------------------------------------
    def visit_Call(self, node):
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "array" and isinstance(func.value, ast.Attribute)
                and func.value.attr in ("shared", "local")):
            shape = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "shape"), None)
            if shape is not None:
                self._check_shape(shape, f"cuda.{func.value.attr}.array", node.lineno)
        return self.generic_visit(node)

    def _check_shape(self, shape: ast.expr, what: str, line: int) -> None:
        """numba-cuda compiles only shapes that are literal ints or global constants, or tuples of them."""
        for item in shape.elts if isinstance(shape, ast.Tuple) else [shape]:
            if isinstance(item, ast.Name) and item.id in self.local_names:
                raise SourceError(
                    f"line {line}: the shape of {what} uses `{item.id}`, a variable of the kernel; the size must be "
                    "known when the kernel is compiled: a number or a global constant (numba refuses it too)")
            if not (isinstance(item, ast.Name) or (isinstance(item, ast.Constant) and type(item.value) is int)):
                raise SourceError(
                    f"line {line}: the shape of {what} must be numbers or global constants, or a tuple of them; "
                    f"numba cannot compile `{ast.unparse(item)}` there: define a global such as "
                    "`TILE_PADDED = TILE + 1` and use that")


def _local_names(function: ast.FunctionDef) -> set[str]:
    names = {a.arg for a in function.args.args + function.args.kwonlyargs + function.args.posonlyargs}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def source_of(function: types.FunctionType) -> tuple[str, str, int]:
    """(source, file name, first line) of a function; a clear error when Python kept no source."""
    code = function.__code__
    try:
        lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError):
        raise SourceError(
            f"cannot read the source of `{function.__name__}` ({code.co_filename}); the simulator needs it: "
            "define kernels in a file or a notebook cell, not with exec() or in the interactive prompt") from None
    return "".join(lines), code.co_filename, first


def instrument(function: types.FunctionType, helpers: dict) -> types.FunctionType:
    """A copy of `function` whose array accesses and branches call `helpers` (named as in HELPERS)."""
    source, filename, first = source_of(function)
    tree = ast.parse(textwrap.dedent(source))
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef):
        raise SourceError(f"`{function.__name__}` must be defined with `def` to be simulated")
    ast.increment_lineno(tree, first - 1)
    definition.decorator_list = []
    lines = {first + i: text for i, text in enumerate(source.splitlines())}
    body = _Instrument(function.__name__, lines, _local_names(definition)).visit(definition)

    # def _aisys_factory(<helpers>, <free variables>): def kernel(...): ...; return kernel
    free = list(function.__code__.co_freevars)
    factory = ast.FunctionDef(
        name="_aisys_factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in (*HELPERS, *free)], kwonlyargs=[],
                           kw_defaults=[], defaults=[]),
        body=[body, ast.Return(ast.Name(definition.name, ast.Load()))], decorator_list=[], returns=None,
        type_params=[])
    module = ast.Module([factory], type_ignores=[])
    ast.fix_missing_locations(module)
    namespace: dict = {}
    exec(compile(module, filename, "exec"), function.__globals__, namespace)
    cells = [c.cell_contents for c in (function.__closure__ or ())]
    rebuilt = namespace["_aisys_factory"](*(helpers[h] for h in HELPERS), *cells)
    rebuilt.__defaults__ = function.__defaults__
    return rebuilt

