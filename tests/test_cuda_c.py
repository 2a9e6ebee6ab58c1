"""CUDA C kernels through CuPy: every source compiles without a GPU, the checks skip without one, and on a GPU
the references match torch.

The tests that launch kernels need a GPU and CuPy and are skipped (never passed) without them.
"""

import ast
import importlib.util

import numpy as np
import pytest
import torch

from aisys import cuda_c, ptx
from aisys.cuda_c import reduction, softmax, transpose
from aisys_grader import wrong
from aisys_grader.exercise import find
from run_solutions import ROOT  # not notebooks: the GPU tests run where the notebook tool chain is missing

EXERCISE = "02-gpu-programming/cuda_c"
SOLUTION = ROOT / "solutions" / EXERCISE / "notebook.py"
WRONG = wrong.answers(EXERCISE)
REFERENCES = {"SUM_SOURCE": reduction, "SOFTMAX_SOURCE": softmax, "TRANSPOSE_SOURCE": transpose}
KERNELS = {"SUM_SOURCE": "block_sum", "SOFTMAX_SOURCE": "softmax_rows", "TRANSPOSE_SOURCE": "transpose_tiled"}

needs_gpu = pytest.mark.skipif(cuda_c.unavailable() is not None, reason=f"needs a GPU and CuPy: {cuda_c.unavailable()}")
needs_nvrtc = pytest.mark.skipif(importlib.util.find_spec("cuda.bindings") is None,
                                 reason="needs NVIDIA's compiler wheels (the book extra)")


def notebook_scope(answer="solution"):
    """The globals of the solution notebook, of a known-wrong answer's, or of the blank student notebook."""
    notebooks = pytest.importorskip("notebooks", reason="needs the notebook tool chain (nbformat)")
    if answer == "blank":
        return notebooks.namespace(notebooks.student_notebook(EXERCISE))
    if answer == "solution":
        return notebooks.namespace(notebooks.source_notebook(EXERCISE))
    return notebooks.wrong_namespace(EXERCISE, answer)


def grade(scope, hidden):
    return pytest.importorskip("notebooks").grade(EXERCISE, scope, hidden=hidden, seed=1)


def solution_sources() -> dict[str, str]:
    """The CUDA C sources of the solution, as the notebook's string constants, solution markers removed."""
    constants = {node.targets[0].id: node.value.value for node in ast.parse(SOLUTION.read_text()).body
                 if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                 and isinstance(node.value.value, str)}
    return {name: "\n".join(line for line in constants[name].split("\n") if "SOLUTION" not in line)
            for name in REFERENCES}


def test_the_reference_is_the_solution():
    for name, source in solution_sources().items():
        assert source == REFERENCES[name].SOURCE, f"{name} of the solution differs from {REFERENCES[name].__name__}"


@needs_nvrtc
@pytest.mark.parametrize("answer", ["solution", *WRONG], ids=lambda a: getattr(a, "name", a))
def test_every_source_compiles_without_a_gpu(answer):
    """The solution's kernels and every wrong answer's (a wrong answer must be wrong, not broken)."""
    scope = notebook_scope(answer)
    for name, kernel in KERNELS.items():
        assert f".entry {kernel}(" in cuda_c.ptx(scope[name])


@needs_nvrtc
def test_the_kernels_use_shuffles_barriers_and_a_padded_tile():
    sources = solution_sources()
    assert "shfl.sync.down" in cuda_c.ptx(sources["SUM_SOURCE"])
    assert "shfl.sync.bfly" in cuda_c.ptx(sources["SOFTMAX_SOURCE"])
    for name in KERNELS:
        assert "bar.sync" in cuda_c.ptx(sources[name])
    try:
        usage = ptx.resource_usage(cuda_c.ptx(sources["TRANSPOSE_SOURCE"]))
    except FileNotFoundError as missing:  # ptxas
        pytest.skip(str(missing))
    assert usage["shared_bytes"] == 4 * 32 * 33 and usage["spill_stores"] == 0


def test_the_compiler_reports_errors_with_its_messages():
    if importlib.util.find_spec("cuda.bindings") is None:
        with pytest.raises(RuntimeError, match="compiler wheels"):
            cuda_c.ptx("")
        return
    with pytest.raises(RuntimeError, match='identifier "INFINITY" is undefined'):
        cuda_c.ptx('extern "C" __global__ void k(float* x) { x[0] = INFINITY; }')


# Without a GPU -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer", ["solution", "blank", *WRONG], ids=lambda a: getattr(a, "name", a))
def test_the_checks_are_skipped_without_a_gpu_never_passed_or_failed(monkeypatch, capsys, answer):
    monkeypatch.setenv("AISYS_DEVICE", "cpu")  # also on a machine with a GPU
    scope = notebook_scope(answer)
    for hidden in (False, True):
        results = grade(scope, hidden)
        assert len(results) == 10  # four of correctness; six of speed, optional (the notebook graded without them)
        for name, result in results.items():
            assert result.skipped and not result.passed and not result.failed and result.score == 0, (name, result)
            assert result.message == "skipped: needs a GPU (AISYS_DEVICE=cpu)"
            assert result.optional == name.endswith("_speed"), name
    capsys.readouterr()
    scope["check"]("cuda_transpose")  # the notebook's own check cell: prints, does not raise
    assert capsys.readouterr().out.endswith(
        "skipped: needs a GPU (AISYS_DEVICE=cpu): cuda_transpose (visible cases) not checked\n")


def test_the_checks_are_skipped_without_cupy(monkeypatch):
    monkeypatch.setattr("aisys.device.current", lambda: "cuda")
    monkeypatch.setattr("aisys.cuda_c.cupy_problem", lambda: "CuPy is not installed: pip install -e '.[gpu]'")
    results = grade(notebook_scope(), hidden=False)
    assert {r.message for r in results.values()} == {
        "skipped: needs a GPU with CuPy (CuPy is not installed: pip install -e '.[gpu]')"}


@pytest.mark.parametrize("call, message", [
    (lambda: reduction.vector_sum(np.zeros(3, np.float32)), "x must be a 1-D float32 torch tensor, got ndarray"),
    (lambda: reduction.vector_sum(torch.zeros(3, dtype=torch.float64)),
     "x must be a 1-D float32 torch tensor, got a 1-D torch.float64 tensor"),
    (lambda: softmax.softmax(torch.zeros(3)), "x must be a 2-D float32 torch tensor, got a 1-D torch.float32"),
    (lambda: transpose.transpose(torch.zeros(2, 2, 2)), "a must be a 2-D float32 torch tensor, got a 3-D"),
    (lambda: transpose.transpose(torch.zeros(32 * 65535 + 1, 0)), "a must have at most 2097120 rows"),
])
def test_references_validate_their_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_references_say_why_they_cannot_run(monkeypatch):
    monkeypatch.setenv("AISYS_DEVICE", "cpu")
    assert cuda_c.unavailable() == "AISYS_DEVICE=cpu asks for the CPU"
    with pytest.raises(RuntimeError, match="run on a GPU through CuPy, and cannot run here: AISYS_DEVICE=cpu"):
        reduction.vector_sum(torch.ones(3))


# On a GPU ------------------------------------------------------------------------------------------------------------

@needs_gpu
@pytest.mark.parametrize("n", [0, 1, 31, 255, 256, 257, 256 * 1024, 256 * 1024 + 1, 2**24 + 3])
def test_vector_sum_matches_torch(n):
    x = torch.rand(n, device="cuda")
    got = reduction.vector_sum(x)
    assert got.shape == () and got.dtype == torch.float32 and got.device == x.device
    assert abs(got.item() - x.double().sum().item()) <= 1e-5 * x.double().abs().sum().item() + 1e-6


@needs_gpu
@pytest.mark.parametrize("shape, scale", [((1, 1), 1), ((3, 31), 3), ((5, 257), 3), ((64, 4097), 3),
                                          ((8, 1000), 1e4), ((0, 7), 1), ((7, 0), 1)])
def test_softmax_matches_torch(shape, scale):
    x = scale * torch.randn(shape, device="cuda")
    if x.numel():
        x[x < -scale] = -float("inf")  # masked entries
        x[:, 0] = scale  # never a whole row of -inf
    torch.testing.assert_close(softmax.softmax(x), torch.softmax(x.double(), dim=1).float())


@needs_gpu
def test_softmax_of_a_row_of_minus_infinity_is_nan_as_in_torch():
    x = torch.full((2, 40), -float("inf"), device="cuda")
    x[1, 3] = 0.0
    got = softmax.softmax(x)
    assert torch.isnan(got[0]).all() and torch.isnan(torch.softmax(x, dim=1)[0]).all()
    assert got[1, 3] == 1 and got[1].sum() == 1


@needs_gpu
@pytest.mark.parametrize("shape", [(1, 1), (1, 37), (37, 1), (31, 32), (33, 65), (1000, 3001), (0, 5), (5, 0)])
def test_transpose_is_exact(shape):
    a = torch.randn(shape, device="cuda")
    got = transpose.transpose(a)
    assert got.shape == (shape[1], shape[0]) and got.is_contiguous() and torch.equal(got, a.T)


@needs_gpu
def test_references_return_on_the_device_of_their_input():
    assert reduction.vector_sum(torch.ones(5)).device.type == "cpu"
    assert torch.equal(transpose.transpose(torch.arange(6.0).reshape(2, 3)), torch.arange(6.0).reshape(2, 3).T)


@pytest.mark.parametrize("times, said", [(2.0, "added more than once"), (0.5, "never added"), (1.001, "drifted")])
def test_the_sum_hint_says_what_a_wrong_sum_of_equal_values_shows(times, said):
    """Without a GPU: the hint alone, on the sum's first case (equal values) and results it might get."""
    checks = importlib.import_module(find(EXERCISE).module)
    x = np.full(checks.EQUAL[0], checks.EQUAL[1], np.float32)
    exact = float(x.sum(dtype=np.float64))
    assert said in checks._sum_hint({"x": x}, times * exact, exact)
