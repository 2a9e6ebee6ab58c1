"""What of `aisys` a grading sandbox holds: default deny.

A job's copy of aisys (job.py) holds `aisys/__init__.py` and `closure(allowed, reference)`: the
modules the exercise's spec lets students import, the packages on the way to them, and every aisys
module they import, found by reading their source (the AST), not by running it. Imports are
followed wherever they stand, inside functions too: `aisys.simt` imports `aisys.device` only when
a kernel launches, and that must work in the sandbox. A reference (an answer key) is never copied.
Imported inside a function, it is left out on purpose: `aisys.collectives.tree` imports the
reference `cost` only in `choose_algorithm`, so that the alpha_beta exercise can run the algorithms
while the answer stays with the grader; that one function fails in the sandbox. Imported when a
module loads, it is a spec error: the module could never be imported there. Imports the AST does
not show (importlib, __import__) are not followed; aisys has none that a sandbox needs.

`spec_problems` checks an exercise's spec against its checks.py: every aisys module the checks
import must be named in `reference` or `student_may_import`, and the closures of its kernel and
clean room must exist (no module of theirs imports a reference when it loads).
"""

import ast
import collections
import functools
from pathlib import Path

import aisys

SOURCE = Path(aisys.__file__).resolve().parent


def source_file(module: str) -> Path | None:
    """The file of an aisys module ('aisys.simt' -> .../aisys/simt/__init__.py), or None when there is none."""
    path = SOURCE.parent.joinpath(*module.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(tree: ast.AST, module: str = "", package: bool = False) -> list[tuple[str, bool]]:
    """The aisys modules that the source `tree` of `module` imports, each with whether the import runs when the
    module loads (False: inside a function). `from x import y` names the module x.y where there is one, else x."""
    found = []

    def visit(node, top: bool):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            top = False
        if isinstance(node, ast.Import):
            found.extend((alias.name, top) for alias in node.names if alias.name.split(".")[0] == "aisys")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package holding `module`
                parts = module.split(".")[:len(module.split(".")) - node.level + package]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base.split(".")[0] == "aisys":
                found.extend((f"{base}.{alias.name}" if source_file(f"{base}.{alias.name}") else base, top)
                             for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child, top)

    visit(tree, True)
    return list(dict.fromkeys(found))


@functools.cache
def _imports(module: str) -> tuple[tuple[str, bool], ...]:
    path = source_file(module)
    if path is None:
        raise ValueError(f"{module} is not a module of aisys ({SOURCE})")
    return tuple(imported_modules(ast.parse(path.read_text(), str(path)), module, path.name == "__init__.py"))


def closure(allowed, reference=()) -> frozenset[str]:
    """The aisys modules a sandbox holds for an exercise that lets students import `allowed` and keeps
    `reference` with the grader: `aisys`, the allowed modules, their packages, and what these import, wherever
    the import stands (see the module's docstring); never a reference. ValueError, naming the chain of
    imports, where an allowed module is a reference or a module of the closure imports one when it loads."""
    reference = set(reference)
    held, queue = set(), collections.deque((name, (name,)) for name in ("aisys", *allowed))
    while queue:
        name, chain = queue.popleft()
        if name in held:
            continue
        if name in reference:
            raise ValueError(f"{name} is a reference and cannot be given to students")
        held.add(name)
        parents = [(name.rsplit(".", 1)[0], True)] if "." in name else []
        for imported, when_loaded in parents + list(_imports(name)):
            if imported not in reference:
                queue.append((imported, chain + (imported,)))
            elif when_loaded:
                raise ValueError(f"{' -> '.join(chain + (imported,))}: {chain[-1]} imports the reference "
                                 f"{imported} when it loads, so it cannot be given to students without it; import "
                                 f"{imported} inside the functions that need it, or make {chain[-1]} a reference")
    return frozenset(held)


def spec_problems(exercise: str) -> list[str]:
    """What is wrong with an exercise's spec.toml as its checks.py and the sandbox see it (empty when nothing):
    an aisys module the checks import that the spec names neither in `reference` nor in `student_may_import`
    (the grader would not know whether students may have it), and a kernel or clean room that cannot be built
    without a reference (`closure`)."""
    from .cleanroom import ROOM_MODULES
    from .exercise import find

    found = find(exercise)
    spec, problems = found.spec, []
    declared = set(spec.reference) | set(spec.student_may_import)
    tree = ast.parse(found.checks.read_text(), str(found.checks))
    for module, _ in imported_modules(tree):
        if module != "aisys" and module not in declared:
            problems.append(f"{exercise}: checks.py imports {module}, which spec.toml names neither in reference "
                            "nor in student_may_import")
    for where, extra in (("the kernel", ()), ("the clean room", ROOM_MODULES)):
        try:
            closure([*spec.student_may_import, *extra], spec.reference)
        except ValueError as error:
            problems.append(f"{exercise}: {where} cannot be built from spec.toml: {error}")
    return problems
