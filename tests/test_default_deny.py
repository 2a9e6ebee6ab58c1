"""Default deny: a grading sandbox holds only the aisys modules an exercise's spec lets students import, with what
they import (aisys_grader/boundary.py), so that a reference the spec forgets stays with the grader all the same.

Every exercise's kernel is started as the engine starts it and tries to import every module of aisys; a spec's
checks must name each aisys module they import in `reference` or `student_may_import`.
"""

import json
import textwrap
import time
from pathlib import Path

import aisys_exercises
import pytest
from aisys_grader import boundary
from aisys_grader.engine import Timeouts, grade_notebook
from aisys_grader.exercise import exercise_ids, find
from aisys_grader.generate import source_notebook
from aisys_grader.kernel import SandboxedKernel
from aisys_grader.sandbox import Sandbox
from test_grading import needs_sandbox


def _module(path: Path) -> str:
    parts = path.relative_to(boundary.SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


ALL_MODULES = sorted(map(_module, boundary.SOURCE.rglob("*.py")))  # every module of aisys

# Run in the kernel: which modules import (one line of JSON: module -> "ok" or the error), and what files of aisys
# the kernel holds.
PROBE = textwrap.dedent("""
    import importlib, json, os
    import aisys
    outcome = {}
    for name in MODULES:
        try:
            importlib.import_module(name)
            outcome[name] = "ok"
        except Exception as error:
            outcome[name] = f"{type(error).__name__}: {error}"
    root = os.path.dirname(aisys.__file__)
    files = sorted(os.path.relpath(os.path.join(folder, f), root) for folder, _, names in os.walk(root)
                   for f in names if f.endswith(".py"))
    print(json.dumps({"imports": outcome, "files": files}))
    """)


def _probe(kernel: SandboxedKernel, modules) -> dict:
    done = kernel.execute(f"MODULES = {list(modules)!r}\n{PROBE}", 120)
    assert done.status == "ok", done.outputs
    return json.loads("".join(o.get("text", "") for o in done.outputs).strip().splitlines()[-1])


def _files(modules) -> list[str]:
    return sorted(str(boundary.source_file(m).relative_to(boundary.SOURCE)) for m in modules)


@needs_sandbox
def test_every_exercise_kernel_imports_what_its_spec_allows_and_no_reference():
    """One real kernel for each different copy of aisys (exercises whose closures are the same share one, started
    with the first one's spec): every module in `student_may_import` imports, every `reference` fails, and the
    kernel holds exactly the closure's files, no other module of aisys importable."""
    groups: dict[frozenset, list[str]] = {}
    for exercise in exercise_ids():
        spec = find(exercise).spec
        groups.setdefault(boundary.closure(spec.student_may_import, spec.reference), []).append(exercise)
    start, problems = time.monotonic(), []
    for modules, exercises in groups.items():
        spec = find(exercises[0]).spec
        with SandboxedKernel(Sandbox.create(), spec.student_may_import, spec.reference) as kernel:
            seen = _probe(kernel, ALL_MODULES)
        imports = seen["imports"]
        for exercise in exercises:
            spec = find(exercise).spec
            problems += [f"{exercise}: the reference {m} imports" for m in spec.reference if imports[m] == "ok"]
            problems += [f"{exercise}: {m} does not import: {imports[m]}" for m in spec.student_may_import
                         if imports[m] != "ok"]
        importable = {m for m, outcome in imports.items() if outcome == "ok"}
        if importable != modules or seen["files"] != _files(modules):
            problems.append(f"{exercises}: importable {sorted(importable ^ modules)} differ from the closure, "
                            f"or the files {seen['files']} from {_files(modules)}")
    print(f"{len(groups)} kernels for {sum(map(len, groups.values()))} exercises: {time.monotonic() - start:.1f} s")
    assert not problems, "\n".join(problems)


def test_every_spec_names_the_aisys_modules_its_checks_import():
    assert [p for e in exercise_ids() for p in boundary.spec_problems(e)] == []


# ------------------------------------------------------------------------------------ a spec that forgets a reference

FORGETFUL_CHECKS = '''
"""Checks of an exercise whose spec forgets its reference, aisys.inference.kv_cache."""

import aisys.inference.kv_cache  # noqa: F401  the answer key, which the spec does not list
from aisys_grader.checks import check
from aisys_grader.compare import CheckFailure


@check(points=1)
def kept_out(student, rng, hidden):
    """In the student's kernel the model imports, the forgotten reference does not."""
    for module, expected in (("aisys.inference.model", True), ("aisys.inference.kv_cache", False)):
        if student.call("importable", module, returns="any") is not expected:
            raise CheckFailure(f"{module} importable: expected {expected}")
'''

FORGETFUL_NOTEBOOK = '''# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %%
from aisys_grader import checker

check = checker("{exercise}", globals())


# %% tags=["solution"]
def importable(name):
    """Whether the module `name` imports here."""
    import importlib

    try:
        importlib.import_module(name)
        return True
    except ImportError:
        return False


# %% tags=["check"]
check("kept_out")
'''


def _exercise(root: Path, monkeypatch, exercise: str, spec: str, checks: str, notebook: str = "") -> str:
    """A synthetic exercise folder under `root`, found through aisys_exercises' path as the course's are."""
    folder = root / exercise
    folder.mkdir(parents=True)
    (folder / "spec.toml").write_text(f'title = "a synthetic exercise"\ngpus = 0\n{spec}\n')
    (folder / "checks.py").write_text(checks)
    (folder / "notebook.py").write_text(notebook.format(exercise=exercise))
    monkeypatch.setattr(aisys_exercises, "__path__", [*aisys_exercises.__path__, str(root)])
    return exercise


def test_the_spec_check_finds_an_undeclared_import_and_a_reference_imported_on_load(tmp_path, monkeypatch):
    forgets = _exercise(tmp_path, monkeypatch, "98-boundary/forgets",
                        'reference = []\nstudent_may_import = ["aisys.inference.model"]', FORGETFUL_CHECKS)
    assert boundary.spec_problems(forgets) == [
        (f"{forgets}: checks.py imports aisys.inference.kv_cache, which spec.toml names neither in reference nor in "
         "student_may_import")]
    eager = _exercise(tmp_path, monkeypatch, "98-boundary/eager",
                      'reference = ["aisys.inference.paged"]\nstudent_may_import = ["aisys.inference.paged_attention"]',
                      "import aisys.inference.paged\n")
    kernel, room = boundary.spec_problems(eager)
    assert kernel.startswith(f"{eager}: the kernel cannot be built from spec.toml: aisys.inference.paged_attention -> "
                             "aisys.inference.paged: aisys.inference.paged_attention imports the reference")
    assert room.startswith(f"{eager}: the clean room cannot be built")


def test_the_closure_follows_packages_and_imports_inside_functions_but_never_copies_a_reference():
    assert boundary.closure(["aisys.triton_kernels.softmax"]) >= {"aisys.triton_kernels", "aisys.device",
                                                                   "aisys.triton_kernels._tensors"}
    assert "aisys.device" in boundary.closure(["aisys.simt"])  # imported inside a function of simt.dialect
    with_cost = boundary.closure(["aisys.collectives.tree"])
    assert "aisys.collectives.cost" in with_cost
    # tree imports cost inside choose_algorithm only: kept out, and the rest of tree works without it
    assert boundary.closure(["aisys.collectives.tree"], ["aisys.collectives.cost"]) == with_cost - {
        "aisys.collectives.cost"}
    with pytest.raises(ValueError, match=r"aisys.collectives.tree -> aisys._validate: .* when it loads"):
        boundary.closure(["aisys.collectives.tree"], ["aisys._validate"])
    with pytest.raises(ValueError, match="aisys.inference.kv_cache is a reference"):
        boundary.closure(["aisys.inference.kv_cache"], ["aisys.inference.kv_cache"])


@needs_sandbox
def test_a_reference_the_spec_forgets_stays_out_of_the_grading_kernel(tmp_path, monkeypatch):
    """Graded by the engine: the checks import aisys.inference.kv_cache, which the spec lists nowhere; the student's
    kernel still cannot import it (before default deny, only the modules listed in `reference` were left out)."""
    exercise = _exercise(tmp_path, monkeypatch, "98-boundary/forgets",
                         'reference = []\nstudent_may_import = ["aisys.inference.model"]', FORGETFUL_CHECKS,
                         FORGETFUL_NOTEBOOK)
    handout = source_notebook(exercise)
    graded = grade_notebook(exercise, handout, handout, seed=1, sandbox=Sandbox.create(),
                            timeouts=Timeouts(cell=60, call=60, notebook=300))
    assert graded.checks["kept_out"].passed, graded.checks["kept_out"].message
