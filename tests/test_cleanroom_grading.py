"""Forged pattern checks, graded end to end: a submission that patches the simulator or the traffic recorder in its
own kernel gets exactly the grade of the same wrong answer without the patch.

The launch reports and the recorded messages that checks grade are made in the grader's clean room, which runs
the student's definitions again from their source (aisys_grader/cleanroom.py): nothing the kernel patched is there.
"""

import re
import time
from pathlib import Path

import jupytext
import nbformat
import numpy as np
import pytest

from aisys_grader import cleanroom, plain, wrong
from aisys_grader.exercise import find
from aisys_grader.course import grade
from aisys_grader.engine import Timeouts, student_program
from aisys_grader.sandbox import Sandbox
from aisys_grader.student import payload
from notebooks import ROOT, wrong_notebook
from processes import leftovers
from test_grading import LIMITS, jobs_in, make_course, needs_sandbox, slug

# The simulator runs every kernel thread in Python, and 8 ranks start in turn on a loaded 2-core machine:
# these notebooks need longer than TIMEOUTS' roofline notebook does.
TIMEOUTS = Timeouts(cell=120, call=120, notebook=900)


def handout_and_source(exercise: str):
    return (nbformat.read(ROOT / "exercises" / f"{exercise}.ipynb", as_version=4),
            nbformat.read(ROOT / "autograder" / "source" / f"{exercise}.ipynb", as_version=4))


def answers(notebook) -> list:
    return [c for c in notebook.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def with_answer(notebook, defines: str, code: str):
    """The notebook with the answer cell that defines `defines` replaced by `code`."""
    cell = next(c for c in answers(notebook) if re.search(rf"^def {defines}\(", c.source, re.M))
    cell.source = code
    return notebook


def with_cell_after_setup(notebook, code: str):
    index = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code") + 1
    notebook.cells.insert(index, nbformat.v4.new_code_cell(code))
    return notebook


# --------------------------------------------------------------------------------------------- the reduction

FORGE_REPORTS = '''
import aisys.simt.launch as simt_launch

real_run = simt_launch.run


def forged_run(*args):
    """Every launch report says: no divergence, no bank conflicts, no race, every sector used."""
    report = real_run(*args)
    data = report._data
    data["branches"]["divergent"] = data["shared"]["bank_conflicts"] = 0
    data["global"]["ideal_sectors"] = data["global"]["sectors"]
    data["errors"] = []
    for line in data["lines"]:
        line["divergent"] = line["bank_conflicts"] = 0
        line["ideal_sectors"] = line["sectors"]
    return report


simt_launch.run = forged_run
'''


def reduction_submissions() -> dict:
    exercise = "02-gpu-programming/reduction"
    handout, _ = handout_and_source(exercise)
    answer = next(a for a in wrong.answers(exercise) if a.name == "interleaved_addressing")

    def interleaved():  # the known-wrong answer's notebook, its tree_kernel edited as tests/test_exercises.py runs it
        return student_program(handout, wrong_notebook(exercise, answer))

    return {"interleaved addressing": interleaved(),
            "interleaved addressing, reports forged": with_cell_after_setup(interleaved(), FORGE_REPORTS)}


# --------------------------------------------------------------------------------------------- tree all-reduce

FORGE_TRAFFIC = '''
import contextlib

import aisys.collectives.traffic as traffic_module

real_record = traffic_module.record
recording = []


@contextlib.contextmanager
def forged_record(allow_collectives=False):
    """The grader's recorder, told to let collectives through; the log stays reachable from here."""
    with real_record(allow_collectives=True) as log:
        recording.append(log)
        try:
            yield log
        finally:
            recording.pop()


traffic_module.record = forged_record


class DryRun:
    """torch.distributed as the honest algorithm calls it: each message goes into the log, none is sent."""

    def __init__(self, real):
        self.real = real

    def get_rank(self):
        return self.real.get_rank()

    def get_world_size(self):
        return self.real.get_world_size()

    def post(self, kind, tensor, peer):
        recording[-1].messages.append(traffic_module._message(kind, [tensor], peer))
        return self

    def wait(self):
        pass

    def send(self, tensor, peer):
        self.post("send", tensor, peer)

    def recv(self, tensor, peer):
        self.post("recv", tensor, peer)

    def isend(self, tensor, peer):
        return self.post("send", tensor, peer)

    def irecv(self, tensor, peer):
        return self.post("recv", tensor, peer)

    def P2POp(self, op, tensor, peer):
        return op, tensor, peer

    def batch_isend_irecv(self, ops):
        return [op(tensor, peer) for op, tensor, peer in ops]


def forge_messages(honest, tensor, *args):
    """Log the messages the honest algorithm would have sent."""
    global dist
    real = dist
    dist = DryRun(real)
    try:
        honest(tensor.clone(), *args)
    finally:
        dist = real
'''

ALL_REDUCE = {  # the answer cells: dist.all_reduce, which the checks forbid
    "recursive_doubling": "def recursive_doubling(tensor, group):\n{forge}    dist.all_reduce(tensor)\n",
    "recursive_doubling_all_reduce": "def recursive_doubling_all_reduce(tensor):\n{forge}    dist.all_reduce(tensor)\n"
                                     "    return tensor\n",
    "tree_all_reduce": "def tree_all_reduce(tensor):\n{forge}    dist.all_reduce(tensor)\n    return tensor\n",
}


def honest_functions() -> str:
    """The solution's three rank functions, renamed honest_*: what the forgery logs as its messages."""
    notebook = jupytext.read(find("06-collectives/tree_allreduce").notebook)
    code = "\n\n".join(c.source for c in notebook.cells if "solution" in c.metadata.get("tags", [])
                       and any(f"def {name}(" in c.source for name in ALL_REDUCE))
    for name in ALL_REDUCE:
        code = re.sub(rf"\b{name}\(", f"honest_{name}(", code)
    return code


def tree_submissions() -> dict:
    handout, source = handout_and_source("06-collectives/tree_allreduce")

    def all_reduce(forged: bool):
        notebook = student_program(handout, source)
        for name, template in ALL_REDUCE.items():
            args = "tensor, group" if name == "recursive_doubling" else "tensor"
            forge = f"    forge_messages(honest_{name}, {args})\n" if forged else ""
            with_answer(notebook, name, template.format(forge=forge))
        return with_cell_after_setup(notebook, FORGE_TRAFFIC + "\n\n" + honest_functions()) if forged else notebook

    return {"dist.all_reduce": all_reduce(False), "dist.all_reduce, messages forged": all_reduce(True)}


# --------------------------------------------------------------------------------------------- grading


def graded(tmp_path: Path, exercise: str, submissions: dict) -> dict:
    """Each submission's score, graded by the engine in the sandbox, in a course holding this notebook only."""
    assignment, notebook = exercise.split("/")
    course = make_course(tmp_path, assignment, notebook)
    folder = tmp_path / "submissions"
    for name, nb in submissions.items():
        path = folder / slug(name) / assignment / f"{notebook}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    start = time.monotonic()
    with jobs_in(tmp_path / "jobs"):
        rows = grade(folder, course, assignment, workers=2, timeouts=TIMEOUTS, limits=LIMITS, progress=False)
    print(f"\ngraded {len(rows)} submissions of {exercise} in {time.monotonic() - start:.0f} s")
    return {row["student"]: (row["score"], row["max_score"]) for row in rows}


@needs_sandbox
@pytest.mark.slow
def test_forged_launch_reports_get_the_grade_of_the_same_wrong_kernel(tmp_path):
    scores = graded(tmp_path, "02-gpu-programming/reduction", reduction_submissions())
    print(scores)
    honest, forged = scores[slug("interleaved addressing")], scores[slug("interleaved addressing, reports forged")]
    assert honest == (11, 14)  # block_sums_tree_sequential (3 points) fails: every warp diverges at every level
    assert forged == honest


@needs_sandbox
@pytest.mark.slow
def test_forged_traffic_records_get_the_grade_of_the_same_collective(tmp_path):
    scores = graded(tmp_path, "06-collectives/tree_allreduce", tree_submissions())
    print(scores)
    honest, forged = scores[slug("dist.all_reduce")], scores[slug("dist.all_reduce, messages forged")]
    assert honest == (2, 10)  # only choose_algorithm passes: dist.all_reduce raises where messages are recorded
    assert forged == honest


# --------------------------------------------------------------------------------------------- the room itself

CELL = """
import numpy as np

SEEN = []


def spin(x):
    while True:
        pass


def remember(x):
    for i in range(10000):
        print("noise", i)
    SEEN.append(x)
    return len(SEEN)
"""


@needs_sandbox
def test_the_grading_room_kills_a_call_at_its_limit_and_runs_each_call_in_a_fresh_process(tmp_path):
    with jobs_in(tmp_path / "jobs") as jobs:
        room = cleanroom.SandboxedRoom(Sandbox.create(limits=LIMITS))
        try:
            reply, _, why = room.reply(cleanroom.request(["", CELL], "simt", "spin", payload((1,), {}), "any"), 1)
            assert reply is None and why == "did not return within 1 s"
            process = room.job.process
            for _ in range(2):  # a fresh namespace each time: SEEN starts empty; what it printed went nowhere
                reply, _, why = room.reply(cleanroom.request(["", CELL], "simt", "remember", payload((1,), {}),
                                                             "integer"), 10)
                assert plain.decode(reply["value"]) == 1 and set(reply) == {"status", "value", "launches"}
            assert room.job.process is process, "a call that ran out of time is killed, not its room"
        finally:
            room.close()
        assert leftovers(jobs) == [] and not list(Path(jobs).iterdir())


@needs_sandbox
def test_the_grading_room_runs_triton_kernels_in_its_interpreter_and_counts_them(tmp_path):
    from test_grammar import TRITON_KERNEL

    with jobs_in(tmp_path / "jobs") as jobs:
        room = cleanroom.SandboxedRoom(Sandbox.create(limits=LIMITS))
        try:
            reply, _, why = room.reply(cleanroom.request(["", TRITON_KERNEL], "triton", "doubled",
                                                         payload((np.ones(10, np.float32),), {}), "array"), 30)
            assert reply is not None and reply["status"] == "ok", (why, reply)
            assert plain.decode(reply["value"]).tolist() == [2.0] * 10
            (launch,) = plain.decode(reply["launches"])
            assert (launch["kernel"], launch["programs"], launch["loaded"], launch["stored"]) == ("double_kernel", 3,
                                                                                                  10, 10)
        finally:
            room.close()
        assert leftovers(jobs) == [] and not list(Path(jobs).iterdir())
