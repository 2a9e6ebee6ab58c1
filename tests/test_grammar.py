"""The clean room's grammar: every definition of the kernel and collective exercises is accepted, every known way
out of the dialect is refused with the line, the construct and why; and the clean room runs only what passed."""

import types

import jupytext
import numpy as np
import pytest

from aisys_grader import CheckFailure, cleanroom, grammar, wrong
from aisys_grader.exercise import find
from aisys_grader.student import InProcessStudent, payload

SIMT_EXERCISES = [f"02-gpu-programming/{name}" for name in
                  ("vector_add", "reduction", "transpose", "histogram", "scan", "bitonic_sort")] + \
    [f"09-drills/{name}_simt" for name in ("reduction", "dot_product", "gemv", "matmul_tiled", "bitonic_sort",
                                           "odd_even_sort")]
RANKS_EXERCISES = [f"06-collectives/{name}" for name in ("ring_allreduce", "tree_allreduce", "alltoall_moe")] + [
    f"05-parallel-training/{name}" for name in ("pipeline_schedules", "ddp", "zero", "tensor_parallel")]
NOT_GRADED = {  # definitions of locked cells the clean room may refuse: demos that record or start ranks themselves
    "check", "checker", "traffic", "run_ranks", "RanksFailed", "show_on_ranks", "bytes_sent_per_rank", "moe_demo",
    "show_timeline", "harness", "zero_harness", "zero_demo", "show_tp_mlp"}


def cells(exercise: str, answer: wrong.Answer | None = None) -> list[tuple[list[str], str]]:
    """(tags, source) of each code cell of an exercise's solution notebook, or of a known-wrong answer's."""
    notebook = jupytext.read(find(exercise).notebook) if answer is None else \
        jupytext.reads(wrong.wrong_program(exercise, answer), fmt="py:percent")
    return [(c.metadata.get("tags", []), c.source) for c in notebook.cells if c.cell_type == "code"]


def dialect_of(exercise: str) -> grammar.Dialect:
    return grammar.SIMT if exercise in SIMT_EXERCISES else grammar.RANKS


@pytest.mark.parametrize("exercise", SIMT_EXERCISES + RANKS_EXERCISES)
def test_every_definition_of_the_solutions_and_known_wrong_answers_is_accepted(exercise):
    answers = [source for tags, source in cells(exercise) if "solution" in tags]
    modules = cleanroom.student_may_import(exercise)
    for answer in [None, *wrong.answers(exercise)]:
        sources = [source for _, source in cells(exercise, answer)] + ([answer.code] if answer and answer.code else [])
        read = grammar.read(sources, dialect_of(exercise), modules)
        refused = {name: str(d.refusal) for d in read if d.refusal for name in d.names}
        assert set(refused) <= NOT_GRADED, (answer and answer.name, refused)
    assert answers and not {n for d in grammar.read(answers, dialect_of(exercise)) for n in d.names} & NOT_GRADED


def refusal(code: str, dialect=grammar.SIMT, prelude: str = "import numpy as np\nfrom aisys.simt import cuda\n"):
    """The refusal of the last definition of `code`, run after `prelude`."""
    read = grammar.read([prelude, code], dialect)
    last = [d for d in read if d.cell == 1][-1]
    assert last.refusal is not None, f"accepted: {code}"
    return last.refusal


ATTACKS = [  # (code, what the message must say)
    ("def f(x):\n    return x.__class__\n", "names starting with `_`"),
    ("def f(x):\n    return '{0.__class__}'.format(x)\n", "`.format` can look up attributes"),
    ("def f(x):\n    return '{0[0]}'.format(x)\n", "`.format` can look up attributes"),
    ("def f(x, s):\n    return s.format(x)\n", "`.format` can look up attributes"),
    ("def f(x):\n    return '{a.__class__}'.format_map({'a': x})\n", "`.format_map` can look up attributes"),
    ("def f(x):\n    g = (i for i in x)\n    return g.gi_frame.f_back.f_globals\n", "`.gi_frame`"),
    ("def f(x):\n    try:\n        x()\n    except Exception as e:\n        return e.__traceback__.tb_frame\n", "`_`"),
    ("def f(x):\n    return np.ctypeslib.as_array(x)\n", "`np.ctypeslib` is not part of"),
    ("def f(x):\n    return x.ctypes.data\n", "`.ctypes`"),
    ("def f(x):\n    return np.load('answers.npy')\n", "`np.load`"),
    ("def f(x):\n    x.tofile('/tmp/x')\n", "`.tofile`"),
    ("def f(x):\n    return np.lib.stride_tricks.as_strided(x, (10**9,), (1,))\n", "`np.lib`"),
    ("def f(x):\n    return np.frombuffer(x)\n", "`np.frombuffer`"),
    ("class Anything:\n    pass\n", "classes are not part of"),
    ("@print\ndef f(x):\n    return x\n", "only the decorators"),
    ("@np.vectorize\ndef f(x):\n    return x\n", "`np.vectorize`"),
    ("def f(x, g=getattr):\n    return g(x, 'shape')\n", "the builtin `getattr`"),
    ("def f(x, g=np.load):\n    return g\n", "`np.load`"),
    ("f = lambda g=eval: g('1')\n", "the builtin `eval`"),
    ("def f(x):\n    return __builtins__['eval']\n", "names starting with `_`"),
    ("def f(x):\n    return setattr(x, 'y', 1)\n", "the builtin `setattr`"),
    ("def f(x):\n    return exec('import os')\n", "the builtin `exec`"),
    ("def f(x):\n    return compile('1', 'f', 'eval')\n", "the builtin `compile`"),
    ("def f(x):\n    return open('/etc/passwd').read()\n", "the builtin `open`"),
    ("def f(x):\n    return __import__('os')\n", "names starting with `_`"),
    ("def f(x):\n    return globals()\n", "the builtin `globals`"),
    ("def f(x):\n    return locals()\n", "the builtin `locals`"),
    ("def f(x):\n    return vars(x)\n", "the builtin `vars`"),
    ("def f(x):\n    return dir(x)\n", "the builtin `dir`"),
    ("def f(x):\n    return type(x)\n", "the builtin `type`"),
    ("def f(x):\n    return super()\n", "the builtin `super`"),
    ("def f(x):\n    breakpoint()\n", "the builtin `breakpoint`"),
    ("def f(x):\n    return input()\n", "the builtin `input`"),
    ("def f(x):\n    return memoryview(x)\n", "the builtin `memoryview`"),
    ("def f(x):\n    return help(x)\n", "the builtin `help`"),
    ("def f(x):\n    return object()\n", "the builtin `object`"),
    ("def f(x):\n    return hasattr(x, 'y')\n", "the builtin `hasattr`"),
    ("def f(x):\n    x.shape = (1,)\n", "assigning to or deleting an attribute"),
    ("def f(x):\n    del x.shape\n", "only names and elements can be deleted"),
    ("def f(x):\n    global np\n", "`global` is not part of"),
    ("def f(x):\n    yield x\n", "`yield`"),
    ("async def f(x):\n    return x\n", "`async`"),
    ("def f(x):\n    import os\n    return os\n", "imports belong at the top of a cell"),
    ("def f(x):\n    with np.errstate():\n        return x\n", "`with` is not part of"),
    ("def f(x):\n    match x:\n        case _:\n            return x\n", "`Match` is not part of"),
    ("np = 3\n", "`np` names `numpy`"),
    ("def f(np):\n    return np\n", "`np` names `numpy`"),
    ("m = np\n", "`np` is a module here"),
    ("r = np.random\n", "`np.random` is a module here"),
    ("def f(x):\n    return x.array\n", "`.array`"),  # a simulated array's numpy array: accesses not logged
    ("def f(x):\n    x.store(0, 1.0, 0)\n", "`.store`"),
    ("def f(x):\n    return cuda.jit(f).simulated\n", "`.simulated`"),
    ("def f(x):\n    return cuda.numba\n", "`cuda.numba`"),
]


@pytest.mark.parametrize("code, says", ATTACKS, ids=[a[0].splitlines()[0][:40] for a in ATTACKS])
def test_constructs_outside_the_dialect_are_refused_saying_where_and_why(code, says):
    refused = refusal(code)
    assert says in str(refused), str(refused)
    assert str(refused).startswith(f"line {refused.line} of its cell uses `")


IMPORTS = [
    ("import os\n", grammar.SIMT, "only imports of"),
    ("import aisys.simt.launch as launch\n", grammar.SIMT, "only imports of"),
    ("from aisys.simt import launch\n", grammar.SIMT, "`aisys.simt.launch` is not part of"),
    ("from aisys import simt\nx = simt.profile\n", grammar.SIMT, "`simt.profile` is not part of"),
    ("from numpy import *\n", grammar.SIMT, "`import *`"),
    ("from numpy import ctypeslib\n", grammar.SIMT, "`numpy.ctypeslib` is not part of"),
    ("from . import grammar\n", grammar.SIMT, "only imports of"),
    ("from aisys.collectives import traffic\n", grammar.RANKS, "only imports of"),
    ("import torch\nx = torch.load\n", grammar.RANKS, "`torch.load` is not part of"),
    ("import torch\nx = torch.ops.aten\n", grammar.RANKS, "`torch.ops`"),
    ("import torch\nx = torch.from_file\n", grammar.RANKS, "`torch.from_file`"),
    ("import torch\nx = torch._C\n", grammar.RANKS, "names starting with `_`"),
    ("import torch.distributed as dist\nx = dist.distributed_c10d\n", grammar.RANKS, "`dist.distributed_c10d`"),
    ("import torch.distributed as dist\nx = dist.group.WORLD\n", grammar.RANKS, "`dist.group`"),
    ("import torch.distributed as dist\nx = dist.new_group\n", grammar.RANKS, "`dist.new_group`"),
    ("def f(t):\n    return t.untyped_storage()\n", grammar.RANKS, "`.untyped_storage`"),
    ("def f(t):\n    return t.as_strided((9,), (1,))\n", grammar.RANKS, "`.as_strided`"),
    ("import numpy as np\nimport torch as np\n", grammar.RANKS, "already names `numpy`"),
    ("from triton.runtime import interpreter\n", grammar.TRITON, "only imports of"),
    ("import triton\nx = triton.runtime\n", grammar.TRITON, "`triton.runtime` is not part of"),
    ("from aisys import triton_interpreter\n", grammar.TRITON, "`aisys.triton_interpreter` is not part of"),
    ("import triton.language as tl\nx = tl.inline_asm_elementwise\n", grammar.TRITON, "`tl.inline_asm_elementwise`"),
]


@pytest.mark.parametrize("code, dialect, says", IMPORTS, ids=[i[0].splitlines()[-1][:40] for i in IMPORTS])
def test_imports_and_module_attributes_outside_the_dialect_are_refused(code, dialect, says):
    refused = [d.refusal for d in grammar.read([code], dialect) if d.refusal]
    assert refused and says in str(refused[-1]), refused


def test_the_dialect_s_values_are_never_modules_and_its_attributes_hold_no_escape_hatch():
    """A module reachable as a value would open every attribute of it; these names reach past the simulator or
    the recorder (a simulated array's raw data and logging methods), into the autograd graph's nodes and
    the hooks others registered, or out of the process. (A rank's training code may register hooks of its
    own, `register_hook`: they run its own code, under the same grammar, and their handles offer only
    `remove`.)"""
    for dialect in grammar.DIALECTS.values():
        for path in dialect.paths:
            try:
                value = cleanroom._resolve(path)
            except Exception:  # cuda.threadIdx.x and the like have a value inside kernels only
                continue
            assert not isinstance(value, types.ModuleType), path
        assert not dialect.attributes & {"array", "load", "store", "atomic", "base", "steps", "data", "ctypes",
                                         "tofile", "format", "format_map", "gi_frame", "f_back", "f_globals",
                                         "mro", "simulated", "numba", "function", "py_func", "as_strided",
                                         "untyped_storage", "storage", "set_", "apply_", "grad_fn", "next_functions",
                                         "hooks_dict_ref", "metadata", "register_prehook"}
        assert not {n for n in dialect.attributes | dialect.paths if n.startswith("_") or "._" in n}


def test_names_are_checked_in_scope_a_parameter_may_shadow_a_builtin_and_underscore_is_a_name():
    accepted = "def f(output, input, splits):\n    for _ in range(2):\n        output.copy_(input)\n    return output\n"
    assert not [d for d in grammar.read([accepted], grammar.RANKS) if d.refusal]


def test_format_is_allowed_on_a_literal_whose_fields_look_nothing_up():
    accepted = "def f(x):\n    return '{} is {0!r:>8} and {name}'.format(x, name=1)\n"
    assert not [d for d in grammar.read([accepted], grammar.SIMT) if d.refusal]


def test_a_cell_s_other_statements_are_left_out_and_magics_read_as_ipython_runs_them():
    read = grammar.read(["%matplotlib inline\nimport numpy as np\nprint(np.pi)\nfor i in range(3):\n    pass\n"
                         "x = np.zeros(3)\nx[0] = 1\n"], grammar.SIMT)
    assert [(d.names, d.refusal) for d in read] == [(["np"], None), (["x"], None)]


# ------------------------------------------------------------------------------------------------ the clean room


def room(sources: list[str], function: str, *args, dialect="simt", returns="any", **kwargs) -> dict:
    return cleanroom.reply(cleanroom.request(sources, dialect, function, payload(args, kwargs), returns))


KERNEL = '''
import numpy as np
from aisys.simt import cuda


@cuda.jit
def add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


def plus_one(x):
    add_one[1, 32](x)
    return x
'''


def test_the_clean_room_runs_definitions_from_source_and_reports_each_launch():
    answer = room(["", KERNEL, "print('a demo')\nplus_one = None\n", KERNEL], "plus_one", np.zeros(8, np.float32))
    assert answer["status"] == "ok"
    assert [launch["kernel"] for launch in cleanroom.plain.decode(answer["launches"])] == ["add_one"]
    assert cleanroom.plain.decode(answer["value"]).tolist() == [1.0] * 8
    assert room(["", KERNEL, "plus_one = None\n"], "plus_one", np.zeros(8, np.float32)) == {"status": "not_defined"}


def test_a_refused_definition_does_not_run_and_the_call_says_which_line_and_why():
    helper = "def helper(x):\n    x.store(0, 1.0, 0)\n"
    answer = room(["", KERNEL + "\n\n" + helper, "def uses_helper(x):\n    return helper(x)\n"], "uses_helper",
                  np.zeros(2, np.float32))
    line = (KERNEL + "\n\n" + helper).splitlines().index("    x.store(0, 1.0, 0)") + 1
    assert answer["status"] == "refused"
    assert "`helper` is not defined" in answer["message"], answer
    assert f"line {line} of its cell uses `x.store`" in answer["message"], answer
    answer = room(["", KERNEL, "def plus_one(x):\n    return x.__class__\n"], "plus_one", np.zeros(2, np.float32))
    assert answer["status"] == "refused" and "line 2 of its cell uses `x.__class__`" in answer["message"], answer


def test_annotations_are_kept_as_text_so_a_refused_typing_import_does_not_stop_a_definition():
    cell = "from typing import Optional\n\ndef twice(x: Optional[int]) -> Optional[int]:\n    return 2 * x\n"
    assert room(["", cell], "twice", 2) == {"status": "ok", "value": "4", "launches": "[]"}


def test_the_clean_room_s_builtins_are_the_dialect_s_only():
    """And __import__, for C code's lazy imports (torch's): a name the grammar never lets student code write."""
    namespace, _ = cleanroom.definitions(["x = 1\n"], "simt")
    assert set(namespace["__builtins__"]) == grammar.BUILTINS | {"__import__"}
    assert "refused" == cleanroom.reply(cleanroom.request(["f = lambda: __import__('os')\n"], "simt", "f",
                                                          '[[], {}]', "any"))["status"]


TILED = """
import numpy as np


def tile(x, start, size):
    return x[start:start + size] * 2.0


def whole(x):
    return x * 2.0


def tiled(x, size):
    out = np.empty_like(x)
    for start in range(0, len(x), size):
        out[start:start + size] = tile(x, start, size)
    return out
"""


def test_the_traced_dialect_reports_the_peak_memory_of_a_call_and_the_calls_of_each_function():
    scope = {"In": ["", TILED]}
    exec(TILED, scope)
    x = np.ones(2**17)  # 1 MiB
    value, trace = InProcessStudent(scope).traced_call("tiled", x, 2**10, returns="array")
    assert value.tolist() == [2.0] * 2**17 and trace["calls"] == {"tiled": 1, "tile": 2**7}
    assert 2**20 <= trace["peak_bytes"] < 2**20 + 2**16  # the output, and one tile at a time
    assert InProcessStudent(scope).traced_call("whole", x)[1]["peak_bytes"] >= 2**20
    assert "`numpy` in the grader's tracer" in room(["", "import os\n"], "os", dialect="traced")["message"]
TRITON_KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


def doubled(x):
    t = torch.from_numpy(x)
    double_kernel[(triton.cdiv(t.numel(), 4),)](t, t.numel(), BLOCK=4)
    return t.numpy()
'''


@pytest.mark.parametrize("compiled_here", [False, True])
def test_the_clean_room_runs_triton_kernels_in_its_interpreter_and_counts_each_launch(monkeypatch, compiled_here):
    """Also where this process imported Triton for a GPU (a notebook's self-check there): the room's Triton then
    runs in a process of its own, whose Triton library is interpreted from its import."""
    monkeypatch.setattr(cleanroom, "_triton_compiled_here", lambda: compiled_here)
    answer = cleanroom.reply(cleanroom.request(["", TRITON_KERNEL], "triton", "doubled",
                                               payload((np.ones(10, np.float32),), {}), "array"))
    assert answer["status"] == "ok", answer
    assert cleanroom.plain.decode(answer["value"]).tolist() == [2.0] * 10
    (launch,) = cleanroom.plain.decode(answer["launches"])
    assert launch["kernel"] == "double_kernel" and launch["programs"] == 3 and launch["loaded"] == 10


GENERATOR = """
def generate(factor):
    return (
        "import triton\\nimport triton.language as tl\\nimport torch\\n\\n\\n@triton.jit\\n"
        "def scaled_kernel(x_ptr, n, BLOCK: tl.constexpr):\\n"
        "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\\n"
        f"    tl.store(x_ptr + offsets, {factor} * tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)\\n"
        "\\n\\ndef scaled(x):\\n    t = torch.from_numpy(x)\\n"
        "    scaled_kernel[(triton.cdiv(t.numel(), 4),)](t, t.numel(), BLOCK=4)\\n    return t.numpy()\\n")
"""


def test_generated_source_runs_in_the_clean_room_as_one_more_cell_under_the_grammar(tmp_path):
    """A code generator's output is graded where the student's own kernels are: in the clean room, after the
    notebook's cells, under the dialect's grammar; never executed in the grader or let past the grammar."""
    scope = {"In": ["", GENERATOR]}
    exec(GENERATOR, scope)
    student = InProcessStudent(scope)
    source = student.call("generate", 3, returns="string")
    value, launches = student.profiled_call("scaled", np.ones(6, np.float32), returns="array", dialect="triton",
                                            generated=source)
    assert value.tolist() == [3.0] * 6 and launches[0]["kernel"] == "scaled_kernel" and launches[0]["loaded"] == 6
    escape = tmp_path / "escaped"
    hostile = f"def scaled(x):\n    open({str(escape)!r}, 'w').write('out')\n    return x\n"
    with pytest.raises(CheckFailure, match="open"):
        student.profiled_call("scaled", np.ones(6, np.float32), dialect="triton", generated=hostile)
    assert not escape.exists()
    with pytest.raises(CheckFailure, match="not a string"):
        student.profiled_call("scaled", np.ones(6, np.float32), dialect="triton", generated=["code"])


def test_the_self_check_runs_the_cells_in_ipython_s_history():
    scope = {"In": ["", KERNEL]}
    exec(KERNEL, scope)
    value, launches = InProcessStudent(scope).profiled_call("plus_one", np.zeros(4, np.float32), returns="array")
    assert value.tolist() == [1.0] * 4 and launches[0]["kernel"] == "add_one"
    with pytest.raises(CheckFailure, match="`In`"):
        InProcessStudent({"plus_one": scope["plus_one"]}).profiled_call("plus_one", np.zeros(4, np.float32))
