"""The speed checks' protocol (aisys_grader.speed, reps.py) on the CPU: inputs from seeds, digests checked for every
repetition, the time the grader's own, and replies forged in the student's process buying nothing. Timings here
mean nothing; on a GPU, tests/speed_table.py measures the exercises."""

import dataclasses
import re
import time

import pytest
import torch

from aisys import tensors
from aisys_grader import CheckFailure, InProcessStudent, checks_for, reps, speed
from aisys_grader.exercise import find
from aisys_grader.kernel import KernelStudent, SandboxedKernel
from aisys_grader.sandbox import Sandbox
from notebooks import EXERCISES

WORKLOAD = speed.Workload(
    "soft", (speed.Input((64, 128), "fp32", std=3.0),), reference=lambda x: torch.softmax(x, -1), rtol=1e-5,
    limit=speed.copy_limit(2 * 64 * 128 * 4), work=2 * 64 * 128 * 4, unit="bytes", label="a 64 x 128 fp32 matrix",
    reps=20, floor=0.1, hint="Fuse it.")


@pytest.fixture(autouse=True)
def on_the_cpu(monkeypatch):
    monkeypatch.setattr(speed, "DEVICE", "cpu")
    monkeypatch.setenv("AISYS_DEVICE", "cpu")
    monkeypatch.setattr(speed, "BUDGET", 1e6)  # every repetition runs, on a loaded machine too (but see below)


def plan(count=3, **changes):
    return {**speed._plan(WORKLOAD, {}, count, 10.0), **changes}


def softmax(x):
    return torch.softmax(x, -1)


def test_each_repetition_gets_fresh_inputs_from_its_seed_and_a_digest_of_its_result():
    seen = []
    reply = reps.run(lambda x: seen.append(x.clone()) or softmax(x), the_plan := plan())
    assert reply["shapes"] == [[64, 128]] and reply["digests"].shape == (3, 1)
    for r, x in enumerate(seen):
        assert torch.equal(x, reps.inputs(the_plan["inputs"], the_plan["seeds"][r], "cpu")[0])
        weights = reps.weights_for(x.numel(), the_plan["weights"], 0, "cpu")
        assert reply["digests"][r, 0] == pytest.approx(float(softmax(x).reshape(-1) @ weights), rel=1e-6)
    assert not torch.equal(seen[0], seen[1]), "every repetition's inputs are its own"


def test_a_notebook_function_gets_device_tensors_and_keeps_its_result_there():
    kinds = []

    def notebook_function(x, dtype):
        t = tensors.to_device(x, dtype)
        assert t is x, "to_device uses a tensor already on the device in that dtype as it is"
        result = tensors.to_numpy(softmax(t))
        kinds.append(type(result))
        return result

    reps.run(notebook_function, plan(args=["fp32"]))
    assert kinds == [torch.Tensor] * 3 and type(tensors.to_numpy(torch.zeros(2))).__name__ == "ndarray"


def test_a_right_function_is_measured_and_the_checks_of_a_function_share_one_measurement():
    calls = []
    student = InProcessStudent({"soft": lambda x: calls.append(1) or softmax(x)})
    found = speed.measure(student, WORKLOAD)
    assert found.reps == found.planned == WORKLOAD.reps and found.seconds > 0 and found.limit_seconds > 0
    assert speed.measure(student, WORKLOAD) is found and len(calls) == 2 + WORKLOAD.reps  # warm-up, timed run


@pytest.mark.parametrize("function, message", [
    # a random weighted sum of the error lies within rounding with odds of about 1 in 20,000 a repetition (of 1 in
    # 200 for softmax(1.01 x), which once failed CI here), so either repetition may be the one that fails
    (lambda x: torch.softmax(2 * x, -1), "the warm-up call: soft of a 64 x 128 fp32 matrix gave a wrong result in "
                                             r"repetition [12] of 2 \(a random weighted sum of its elements is off by"),
    (lambda x: softmax(x)[:, :64], r"returned results of shapes \[\[64, 64\]\], expected \[\[64, 128\]\]"),
    (lambda x: 1 / 0, "`soft` raised ZeroDivisionError: division by zero"),
])
def test_a_wrong_result_or_an_error_fails_before_anything_is_timed(function, message):
    with pytest.raises(CheckFailure, match=message):
        speed.require(InProcessStudent({"soft": function}), WORKLOAD, at_least=0.1)


def test_below_the_threshold_the_message_says_how_fast_against_what_and_the_better_way():
    def slow(x):
        time.sleep(0.02)  # far longer than anything else here, on a loaded machine too
        return softmax(x)

    with pytest.raises(CheckFailure) as failure:
        speed.require(InProcessStudent({"soft": slow}), dataclasses.replace(WORKLOAD, reps=5), at_least=0.1)
    assert re.fullmatch(r"soft of a 64 x 128 fp32 matrix took [\d.]+ ms a repetition \([\d,]+ GB/s(, the run stopped "
                        r"after \d+ of 5 repetitions by its time budget)?\): \d+% of this GPU's copy bandwidth, "
                        r"measured in the same run \([\d.]+ ms, [\d,]+ GB/s\); this check asks for 10%\. Fuse it\.",
                        str(failure.value)), str(failure.value)


def test_the_time_budget_stops_code_far_slower_than_the_floor(monkeypatch):
    monkeypatch.setattr(speed, "BUDGET", 4.0)

    def very_slow(x):
        time.sleep(0.25)  # the CPU's copy of 64 KiB takes microseconds: the budget is milliseconds (tens on a busy
        return softmax(x)  # machine, where the grader's no-op takes longer)

    found = speed.measure(InProcessStudent({"soft": very_slow}), WORKLOAD)
    assert found.reps < found.planned == WORKLOAD.reps and found.seconds >= 0.2


# Forged replies: the student's process runs the loop, so it can replace it -------------------------------------------

honest = reps.run  # the loop as the grader wrote it, whatever a test puts in its place


def test_the_time_is_the_graders_clock_around_the_call_whatever_the_reply_says(monkeypatch):
    def forged(function, the_plan):
        time.sleep(0.2)
        return {**honest(function, the_plan), "seconds": 1e-9, "reps": 10**6}

    monkeypatch.setattr(reps, "run", forged)  # what a student's cell can do in its own process
    reply, seconds = InProcessStudent({"soft": softmax}).repeated_call("soft", plan())
    assert seconds >= 0.2 and set(reply) == {"shapes", "digests", "seconds", "reps"}


@pytest.mark.parametrize("forge, message", [
    (lambda reply: {**reply, "digests": reply["digests"] + 1.0}, "gave a wrong result in repetition 1"),
    (lambda reply: {**reply, "digests": reply["digests"].repeat(2, axis=0)}, "gave no readable results"),
    (lambda reply: {"shapes": reply["shapes"]}, "gave no readable results"),
])
def test_made_up_digests_or_repetitions_fail(monkeypatch, forge, message):
    monkeypatch.setattr(reps, "run", lambda function, the_plan: forge(honest(function, the_plan)))
    with pytest.raises(CheckFailure, match=message):
        speed.measure(InProcessStudent({"soft": softmax}), WORKLOAD)


def test_owning_up_to_fewer_repetitions_than_ran_only_makes_it_slower(monkeypatch):
    def slow(x):
        time.sleep(0.002)
        return softmax(x)

    honest_time = speed.measure(InProcessStudent({"soft": slow}), WORKLOAD).seconds

    def fewer(function, the_plan):
        reply = honest(function, the_plan)
        return {**reply, "digests": reply["digests"][:2]}

    monkeypatch.setattr(reps, "run", fewer)
    found = speed.measure(InProcessStudent({"soft": slow}), WORKLOAD)
    assert found.reps == 2 and found.seconds > 3 * honest_time


def test_the_loop_runs_in_the_sandboxed_kernel_and_a_forgery_there_fails():
    source = "import torch\ndef soft(x):\n    return torch.softmax(x, -1)\n"
    forgery = ("import numpy as np\nimport aisys_grader.reps as loop\n"
               "loop.run = lambda f, plan: {'shapes': [[64, 128]], 'digests': np.zeros((plan['reps'], 1))}\n")
    with SandboxedKernel(Sandbox.create(allow_unsandboxed=True), ["aisys.tensors"]) as kernel:
        assert kernel.execute(source, 60).status == "ok"
        found = speed.measure(KernelStudent(kernel), WORKLOAD)
        assert found.reps == WORKLOAD.reps
        assert kernel.execute(forgery, 60).status == "ok"
        with pytest.raises(CheckFailure, match="gave a wrong result in repetition [12] of 2"):  # a zero digest is
            # within rounding of a random weighted sum with odds of about 1 in 20,000
            speed.measure(KernelStudent(kernel), WORKLOAD)


# The exercises' speed checks -----------------------------------------------------------------------------------------

SPEED_CHECKS = [(e, name) for e in EXERCISES for name in checks_for(e) if name.endswith("_speed")]


@pytest.mark.parametrize("exercise, name", SPEED_CHECKS, ids=[f"{e}:{n}" for e, n in SPEED_CHECKS])
def test_a_speed_check_is_optional_and_states_its_threshold_in_its_docstring_and_the_notebook(exercise, name):
    import inspect

    function = checks_for(exercise)[name].function
    source = inspect.getsource(function)
    assert re.search(r"require_gpu\((cupy=True, )?optional=True\)", source), "without a GPU, graded without it"
    [(workload, at_least)] = re.findall(r"speed\.require\(student, (\w+), at_least=([\d.]+)\)", source)
    percent = f"{float(at_least):.0%}"
    assert percent in function.__doc__ and percent in find(exercise).notebook.read_text()
    assert getattr(inspect.getmodule(function), workload).floor <= float(at_least)


def test_the_speed_checks_time_every_exercise_the_issue_names():
    timed = {e for e, _ in SPEED_CHECKS}
    assert timed == {f"02-gpu-programming/{n}" for n in ("triton_reduction", "triton_softmax", "triton_layernorm",
                                                         "triton_fused", "cuda_c")} | {
        "03-tensor-cores/triton_gemm", "07-inference/triton_flash_attention"}
    assert all(find(e).spec.gpus == 1 for e in timed)


def test_a_workload_refuses_a_floor_that_is_no_fraction():
    with pytest.raises(ValueError, match="floor must be a fraction"):
        dataclasses.replace(WORKLOAD, floor=1.5)
