"""aisys.tensors: numpy to tensors on aisys's device and back, by the exercises' format names; with it, Triton's
interpreter checks every address a kernel loads or stores (aisys.triton_interpreter)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from aisys.tensors import TORCH_DTYPES, to_device, to_numpy


@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
def test_round_trip_keeps_values_and_shape(dtype, torch_device):
    x = np.arange(12, dtype=np.float64).reshape(3, 4) / 8  # exact in every format
    t = to_device(x, dtype)
    assert t.dtype == TORCH_DTYPES[dtype] and t.shape == (3, 4) and t.is_contiguous()
    assert t.device.type == torch_device
    back = to_numpy(t)
    assert back.dtype == {"fp32": np.float32, "fp16": np.float16, "bf16": np.float32}[dtype]  # numpy has no bf16
    np.testing.assert_array_equal(back, x)


def test_a_load_past_the_end_finds_the_largest_number():
    t = to_device(np.zeros(5, np.float32), "fp16")
    past = torch.as_strided(t, (8,), (1,))  # what a kernel without a mask reads
    assert (past[5:] == torch.finfo(torch.float16).max).all()


def test_an_unknown_format_is_named():
    with pytest.raises(ValueError, match="dtype must be one of 'fp32', 'fp16', 'bf16'; got 'fp64'"):
        to_device(np.zeros(2), "fp64")


UNMASKED_STORE = '''
from aisys import device

device.use_triton_interpreter()
import torch
import triton
import triton.language as tl

from aisys.tensors import to_device


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n))


x = to_device(torch.arange(10.0).numpy(), "fp32")
for _ in range(20):  # unchecked, 4086 elements written past a small allocation corrupt the heap: the process aborts
    out = torch.zeros(10)
    try:
        copy_kernel[(1,)](x, out, 10, BLOCK=4096)
    except IndexError as error:
        print(error)
    [torch.empty(7 * i + 3) for i in range(100)]
assert out.tolist() == [0.0] * 10, "nothing was written"
print("alive")
'''


def test_an_unmasked_store_in_the_interpreter_is_an_error_naming_the_line_before_memory_is_touched(tmp_path):
    script = tmp_path / "unmasked.py"
    script.write_text(UNMASKED_STORE)
    env = dict(os.environ, AISYS_DEVICE="cpu", PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    first = done.stdout.splitlines()[0]
    assert "copy_kernel (program 0, 0, 0) writes outside the tensors passed to it" in first, first
    assert "at line 15 of unmasked.py (`tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n))`)" \
        in first and "4086 of its 4096 lanes fall outside them, the first just past the end of `out_ptr` (10 float32 " \
        "elements)" in first, first
    assert done.stdout.endswith("alive\n")


def test_a_load_past_the_end_is_an_error_and_launches_are_counted(torch_device):
    if torch_device != "cpu":
        pytest.skip("the interpreter runs on a CPU")
    import triton
    import triton.language as tl

    from aisys import triton_interpreter

    @triton.jit
    def sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + offsets, mask=offsets < n, other=0.0), axis=0))

    @triton.jit
    def unmasked_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + offsets), axis=0))

    x, out = to_device(np.ones(100), "fp32"), torch.zeros(4)
    with triton_interpreter.launches() as done:
        sum_kernel[(4,)](x, out, 100, BLOCK=32)
    assert out.tolist() == [32, 32, 32, 4]
    assert [launch.to_plain() for launch in done] == [
        {"kernel": "sum_kernel", "grid": [4], "programs": 4, "loads": 4, "loaded": 100, "widest_load": 32,
         "loaded_from": {"x_ptr": 100},
         "stores": 4, "stored": 4, "dots": 0, "dot_macs": 0, "atomics": 0}]
    with pytest.raises(IndexError, match=r"unmasked_sum_kernel \(program 3, 0, 0\) reads outside the tensors passed "
                                         r"to it, in `unmasked_sum_kernel` at line \d+ of test_tensors.py "
                                         r"\(`tl.store.*`\): 28 of its 32 lanes fall outside them, the first just "
                                         r"past the end of `x_ptr` \(100 float32 elements\)"):
        unmasked_sum_kernel[(4,)](x, out, 100, BLOCK=32)


def test_a_kernel_loops_from_a_scalar_where_triton_converts_it_as_triton_3_6_does(torch_device, monkeypatch):
    """Triton 3.6's interpreter takes a scalar's index as int() of its one-element array of shape (1,), which
    NumPy 2.4 refuses; Triton 3.9 squeezes first. Here 3.6's conversion stands in for 3.9's: the bounds-checking
    wrapper must give the kernel's `range` its scalars either way."""
    if torch_device != "cpu":
        pytest.skip("the interpreter runs on a CPU")
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    patch_lang_tensor = interpreter._patch_lang_tensor

    def as_triton_3_6(tensor, scope):
        patch_lang_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", as_triton_3_6)

    @triton.jit
    def count_kernel(out_ptr, n):
        total = 0
        for i in range(tl.program_id(0), n):  # both bounds scalars of the interpreter
            total += 1
        tl.store(out_ptr + tl.program_id(0), total)

    out = torch.zeros(3, dtype=torch.int32)
    count_kernel[(3,)](out, 5)
    assert out.tolist() == [5, 4, 3]


def test_a_launch_patches_triton_language_once_for_every_helper_call(torch_device, monkeypatch):
    """Triton patches triton.language again at each call of a @triton.jit function (tl.sum here) inside a kernel: a
    few ms each, a third of a small kernel's time. Within a launch the wrapper lets it do so once per set of modules
    the function sees."""
    if torch_device != "cpu":
        pytest.skip("the interpreter runs on a CPU")
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    patch_lang_tensor, patches = interpreter._patch_lang_tensor, []

    def counted(tensor, scope):
        patches.append(tensor)
        patch_lang_tensor(tensor, scope)

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", counted)  # once per module that Triton patches

    @triton.jit
    def row_sums_kernel(x_ptr, out_ptr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
        for row in range(ROWS):
            total = tl.sum(tl.load(x_ptr + row * BLOCK + tl.arange(0, BLOCK)), axis=0)
            tl.store(out_ptr + row, total)

    x, out = to_device(np.arange(40, dtype=np.float32), "fp32"), torch.zeros(10)
    for _ in range(2):
        row_sums_kernel[(1,)](x, out, ROWS=10, BLOCK=4)
    assert out.tolist() == np.arange(40).reshape(10, 4).sum(1).tolist()
    # per launch: the kernel's module, and tl.sum's one or two (Triton's first rewrite of tl.sum adds tl to the
    # modules it sees); 42 without the wrapper's skipping, one or two for each of the 20 calls of tl.sum
    assert len(patches) <= 2 * 4, f"{len(patches)} modules patched in 2 launches of 10 calls of tl.sum each"
