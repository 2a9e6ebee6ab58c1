"""The launcher and the traffic recorder: real processes that always finish, with what each rank did."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from aisys.collectives import traffic
from aisys.collectives.launch import RanksFailed, run_ranks
from aisys_grader import CheckFailure, InProcessStudent
from aisys_grader.compare import redacted


def shift_right(x):
    """Each rank ends with its left neighbour's tensor: one isend, one recv."""
    rank, p = dist.get_rank(), dist.get_world_size()
    incoming = torch.empty_like(x)
    request = dist.isend(x.clone(), (rank + 1) % p)
    dist.recv(incoming, (rank - 1) % p)
    request.wait()
    x.copy_(incoming)


def recorded_shift(x):
    with traffic.record() as log:
        shift_right(x)
    return x, log.messages


@pytest.mark.parametrize("world_size", [1, 2, 5])
def test_results_come_back_in_rank_order(world_size):
    results = run_ranks(lambda: (dist.get_rank(), dist.get_world_size()), world_size)
    assert results == [(rank, world_size) for rank in range(world_size)]


def test_messages_are_recorded_with_peer_and_bytes_whatever_the_call_path():
    from torch.distributed import isend  # imported before recording starts: still recorded

    def both_paths(x):
        rank = dist.get_rank()
        with traffic.record() as log:
            if rank == 0:
                isend(x, 1).wait()
                dist.batch_isend_irecv([dist.P2POp(dist.isend, x[:2].clone(), 1)])[0].wait()
            else:
                dist.recv(x, 0)
                first = torch.empty(2, dtype=x.dtype)
                dist.recv(first, 0)
        return [(m.kind, m.peer, m.dtype, m.numel, m.nbytes) for m in log.messages]

    sent, received = run_ranks(both_paths, 2, [(torch.arange(5, dtype=torch.float64),)] * 2)
    assert sent == [("send", 1, "float64", 5, 40), ("send", 1, "float64", 2, 16)]
    assert received == [("recv", 0, "float64", 5, 40), ("recv", 0, "float64", 2, 16)]


def test_shift_moves_each_tensor_one_rank_and_records_one_message_each_way():
    results = run_ranks(recorded_shift, 3, [(torch.full((4,), float(r)),) for r in range(3)])
    for rank, (tensor, messages) in enumerate(results):
        assert tensor.tolist() == [float((rank - 1) % 3)] * 4
        assert [(m.kind, m.peer) for m in messages] == [("send", (rank + 1) % 3), ("recv", (rank - 1) % 3)]


def test_a_collective_where_only_messages_are_allowed_fails_naming_it():
    def cheat(x):
        with traffic.record():
            dist.all_reduce(x)

    with pytest.raises(RanksFailed, match=r"dist\.all_reduce was called, but only point-to-point"):
        run_ranks(cheat, 2, [(torch.ones(3),)] * 2)


def test_collectives_are_logged_when_allowed_and_the_class_is_restored_after():
    def allowed(x):
        with traffic.record(allow_collectives=True) as log:
            dist.all_reduce(x)
        dist.barrier()  # after recording: the original method again
        return x.tolist(), [c.name for c in log.collectives]

    assert run_ranks(allowed, 2, [(torch.ones(2),)] * 2)[0] == ([2.0, 2.0], ["all_reduce"])


def test_collectives_are_logged_with_their_whole_size_in_one_order_with_the_marks():
    """The size of a gather's output and a reduce-scatter's input counted whole, with p pieces; an async call is
    logged when posted, before a mark made while it is in flight."""
    def calls(x):
        p = dist.get_world_size()
        with traffic.record(allow_collectives=True) as log:
            handle = dist.all_reduce(x, async_op=True)
            log.mark("posted", bucket=0)
            handle.wait()
            dist.all_gather_into_tensor(torch.empty(3 * p, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
            dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * p))
            dist.all_gather([torch.empty(4, dtype=torch.int32) for _ in range(p)], torch.ones(4, dtype=torch.int32))
        return [entry.to_plain() for entry in log.timeline()]

    timeline = run_ranks(calls, 2, [(torch.ones(5),)] * 2)[0]
    assert [(e.get("name") or e["label"], e.get("numel"), e.get("nbytes"), e.get("dtype")) for e in timeline] == [
        ("all_reduce", 5, 20, "float32"), ("posted", None, None, None),
        ("all_gather_into_tensor", 6, 48, "float64"), ("reduce_scatter_tensor", 4, 16, "float32"),
        ("all_gather", 8, 32, "int32")]
    assert [e["seq"] for e in timeline] == list(range(5)) and timeline[1]["info"] == {"bucket": 0}


def test_a_deadlock_fails_within_the_receive_timeout_on_every_rank():
    def both_receive(x):
        dist.recv(x, 1 - dist.get_rank())

    start = time.monotonic()
    with pytest.raises(RanksFailed) as failure:
        run_ranks(both_receive, 2, [(torch.ones(1),)] * 2, timeout=1)
    assert time.monotonic() - start < 6
    assert [o.status for o in failure.value.outcomes] == ["raised", "raised"]
    assert "Timed out" in str(failure.value)


def test_a_rank_that_never_returns_is_stopped_at_the_wall_timeout_and_nothing_is_left(tmp_path):
    def spin(folder):
        (folder / str(os.getpid())).touch()
        while True:
            pass

    start = time.monotonic()
    with pytest.raises(RanksFailed, match="did not finish in time") as failure:
        run_ranks(spin, 2, [(tmp_path,)] * 2, wall_timeout=1)
    assert time.monotonic() - start < 5
    assert {o.status for o in failure.value.outcomes} == {"stopped"}
    pids = [p.name for p in tmp_path.iterdir()]
    assert len(pids) == 2 and not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]


def test_the_rank_that_failed_first_heads_the_message_not_its_peers():
    def second_raises():
        if dist.get_rank() == 1:
            raise ValueError("tensor must be contiguous")
        dist.recv(torch.empty(1), 1)

    with pytest.raises(RanksFailed) as failure:
        run_ranks(second_raises, 3)
    headline = str(failure.value).splitlines()[0]
    assert headline.startswith("rank 1 raised ValueError: tensor must be contiguous")
    assert "second_raises" in headline  # where, in the learner's code


def test_a_rank_that_exits_is_reported_as_died_with_its_code():
    def exits():
        if dist.get_rank() == 0:
            os._exit(3)

    with pytest.raises(RanksFailed, match=r"rank 0 died without a result \(exit code 3\)"):
        run_ranks(exits, 2)


def sends_more_than_is_received():
    """Rank 0 sends 4 elements to a receive of 3: gloo ends rank 1 from C++ (std::terminate), where Python sees
    nothing."""
    if dist.get_rank() == 0:
        dist.send(torch.ones(4), 1)
    else:
        dist.recv(torch.ones(3), 0)


def test_a_rank_that_gloo_ends_is_reported_with_what_gloo_wrote(capfd):
    with pytest.raises(RanksFailed) as failure:
        run_ranks(sends_more_than_is_received, 2, timeout=2)
    died = failure.value.outcomes[1]
    assert died.status == "died" and "larger than the receive posted for it" in died.error
    assert "Received data size doesn't match expected size" in died.output
    assert str(failure.value).startswith("rank 1 died without a result (exit signal 6): gloo ended it")
    assert "Received data size" in capfd.readouterr().err  # passed on as it was written, too


@pytest.mark.parametrize("kwargs, message", [
    ({"world_size": 0}, "world_size must be an integer >= 1"),
    ({"world_size": 2, "args": [(1,)]}, "args must be a list of 2 argument tuples"),
    ({"world_size": 2, "backend": "mpi"}, "backend must be one of"),
    ({"world_size": 2, "timeout": 0}, "timeout must be a finite number > 0"),
    ({"world_size": 2, "backend": "nccl"}, "needs one GPU per rank"),
])
def test_bad_arguments_are_named(kwargs, message):
    if kwargs.get("backend") == "nccl" and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs")
    with pytest.raises(ValueError, match=message):
        run_ranks(lambda *a: None, **kwargs)


# --- the grader's side: student.call_ranks -------------------------------------------------------

def notebook() -> dict:
    """This module as a notebook whose one cell is this file: call_ranks runs the functions from their source."""
    return {**globals(), "In": ["", Path(__file__).read_text()]}


def ring_shift(x):
    shift_right(x)


def cheat(x):
    dist.all_reduce(x)


def not_yet(x):
    raise NotImplementedError


def raises_on_rank_one(x):
    if dist.get_rank() == 1:
        raise ValueError("bad input")
    shift_right(x)


def test_call_ranks_returns_each_rank_s_tensors_and_messages_case_by_case():
    student = InProcessStudent(notebook())
    cases = [[(np.full(3, r, dtype=np.float32),) for r in range(4)],
             [(np.arange(2, dtype=np.int64) + r,) for r in range(4)]]
    outcomes = student.call_ranks("ring_shift", cases, world_size=4)
    assert len(outcomes) == 2 and all(len(case) == 4 for case in outcomes)
    for rank in range(4):
        assert outcomes[0][rank]["tensors"][0].tolist() == [float((rank - 1) % 4)] * 3
        assert outcomes[1][rank]["tensors"][0].dtype == np.int64
        assert [(m["kind"], m["peer"]) for m in outcomes[0][rank]["messages"]] == \
            [("send", (rank + 1) % 4), ("recv", (rank - 1) % 4)]
        assert outcomes[0][rank]["error"] is None


def test_call_ranks_stops_after_the_first_case_where_a_rank_raised():
    student = InProcessStudent(notebook())
    case = [(np.ones(2, dtype=np.float32),) for _ in range(3)]
    outcomes = student.call_ranks("raises_on_rank_one", [case, case], world_size=3)
    assert len(outcomes) == 1
    assert outcomes[0][1]["error"].startswith("ValueError: bad input")


def test_call_ranks_reports_collectives_missing_and_unfinished_functions():
    student = InProcessStudent(notebook())
    case = [[(np.ones(2, dtype=np.float32),) for _ in range(2)]]
    assert "dist.all_reduce was called" in student.call_ranks("cheat", case, world_size=2)[0][0]["error"]
    with pytest.raises(CheckFailure, match="not implemented yet"):
        student.call_ranks("not_yet", case, world_size=2)
    with pytest.raises(CheckFailure, match="is not defined"):
        student.call_ranks("missing", case, world_size=2)


def reduce_in_place(x):
    dist.all_reduce(x)


def reduced_between_marks(student, x, name):
    """A harness, as chapter 5's checks use them: it calls the student's function `name` and records what it
    did, collectives and its own marks in one order."""
    with traffic.record(allow_collectives=True) as log:
        log.mark("before")
        student[name](x)
        log.mark("after")
    return {"x": x, "timeline": [entry.get("name") or entry.get("label") for entry in
                                 (e.to_plain() for e in log.timeline())]}


def test_call_ranks_with_a_harness_gives_it_the_student_functions_and_returns_what_it_recorded():
    student = InProcessStudent(notebook())
    case = [[(np.full(2, r + 1, dtype=np.float32), "reduce_in_place") for r in range(3)]]
    outcomes = student.call_ranks("reduce_in_place", case, world_size=3,
                                  harness="test_collectives_launch.reduced_between_marks")
    for outcome in outcomes[0]:
        assert outcome["value"]["x"].tolist() == [6.0, 6.0] and outcome["error"] is None
        assert outcome["value"]["timeline"] == ["before", "all_reduce", "after"] and outcome["messages"] == []
    missing = [[(np.ones(2, dtype=np.float32), "cheat_") for _ in range(2)]]
    outcomes = student.call_ranks("reduce_in_place", missing, world_size=2,
                                  harness="test_collectives_launch.reduced_between_marks")
    assert "NameError: name 'cheat_' is not defined" in outcomes[0][0]["error"]
    with pytest.raises(CheckFailure, match="not implemented yet"):
        student.call_ranks("not_yet", [[(np.ones(2, dtype=np.float32), "not_yet")] * 2], world_size=2,
                           harness="test_collectives_launch.reduced_between_marks")


def trains_on_each_rank(x):
    """A backward pass on every rank, as chapter 5's rank functions run."""
    w = x.clone().requires_grad_()
    (w * w).sum().backward()
    x.copy_(w.grad)


def test_call_ranks_on_a_gpu_machine_starts_the_ranks_from_a_process_that_never_ran_autograd(monkeypatch):
    """Where torch sees a GPU, a process that has run backward cannot fork ranks that run backward (autograd's
    device threads): the self-check's ranks start from a room process of the notebook's own, started once and
    reused. Here, that path on a CPU; below, the case itself where there is a GPU."""
    from aisys_grader import cleanroom

    monkeypatch.setattr(cleanroom, "_gpus_visible", lambda: True)
    monkeypatch.setattr(cleanroom, "_ROOMS", {})
    rooms = []
    for _ in range(2):
        outcomes = InProcessStudent(notebook()).call_ranks(
            "trains_on_each_rank", [[(np.full(2, r + 1.0),) for r in range(2)]], world_size=2)
        assert [o["tensors"][0].tolist() for o in outcomes[0]] == [[2.0, 2.0], [4.0, 4.0]]
        rooms.append(cleanroom._ROOMS["ranks"].pid)
    assert rooms[0] == rooms[1] and rooms[0] != os.getpid()
    cleanroom._ROOMS["ranks"].kill()
    cleanroom._ROOMS["ranks"].wait()


def test_the_room_process_path_needs_no_notebook_tool_chain():
    """On a GPU machine tests/run_solutions.py grades in this process, and rank calls (and Triton compiled for the GPU)
    go to a room process of the notebook's own: a path that must import neither nbformat, ZeroMQ nor jupyter_client,
    which such a machine may lack (once it reached nbformat for a constant)."""
    code = textwrap.dedent("""
        import sys

        class Missing:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("nbformat", "zmq", "jupyter_client"):
                    raise ImportError(f"No module named {name!r} (blocked by the test)")

        sys.meta_path.insert(0, Missing())
        import test_collectives_launch as here
        from aisys_grader import cleanroom

        cleanroom._gpus_visible = lambda: True
        try:
            outcomes = here.InProcessStudent(here.notebook()).call_ranks(
                "trains_on_each_rank", [[(here.np.full(2, r + 1.0),) for r in range(2)]], world_size=2)
            print(outcomes[0][1]["tensors"][0].tolist())
        finally:
            cleanroom._ROOMS["ranks"].kill()
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("[4.0, 4.0]")


def test_the_room_s_own_process_runs_ranks_itself_even_where_gpus_are_visible(monkeypatch):
    """The room process runs `main`, which forks a child per call: that child runs the ranks, and never
    asks for yet another room process (which would ask for another, until the call's time ran out)."""
    from aisys_grader import cleanroom, student

    monkeypatch.setattr(cleanroom, "_gpus_visible", lambda: True)
    monkeypatch.setattr(cleanroom, "_reply_in_room_process", lambda request: {"status": "raised", "error": "Again"})
    cases = [[(np.full(2, r + 1.0),) for r in range(2)]]
    request = cleanroom.request(notebook()["In"], "ranks", "trains_on_each_rank", student.payload((cases,), {}),
                                "list", ranks={"world_size": 2, "backend": "gloo", "timeout": 5, "wall_timeout": 30})
    answer = cleanroom._call_in_child({**request, "timeout": 60})
    assert answer["status"] == "ok", answer


@pytest.mark.skipif(torch.cuda.device_count() == 0, reason="needs a GPU: there autograd starts a thread per device")
def test_call_ranks_after_a_backward_in_this_process_still_trains_on_the_ranks():
    w = torch.ones(2, requires_grad=True)
    (w * w).sum().backward()  # autograd's device threads start here
    outcomes = InProcessStudent(notebook()).call_ranks(
        "trains_on_each_rank", [[(np.full(2, r + 1.0),) for r in range(2)]], world_size=2)
    assert [o["tensors"][0].tolist() for o in outcomes[0]] == [[2.0, 2.0], [4.0, 4.0]]
    # gloo's ranks see no GPU: their backward starts no CUDA context per GPU (seconds, which a peer's receive waits)
    assert run_ranks(lambda: torch.cuda.device_count(), 2) == [0, 0]


def leaves_a_receive_pending(x):
    """Posts a receive and never waits on it: every rank returns, with the message still on its way."""
    rank, p = dist.get_rank(), dist.get_world_size()
    dist.irecv(torch.empty_like(x), (rank - 1) % p)
    dist.isend(x.clone(), (rank + 1) % p).wait()


def test_call_ranks_says_why_a_rank_died_and_withholds_its_output_where_hidden():
    student = InProcessStudent(notebook())
    case = [[(), ()]]
    with pytest.raises(CheckFailure) as failure:
        student.call_ranks("sends_more_than_is_received", case, world_size=2, timeout=2)
    assert "rank 1 died without a result (exit signal 6): gloo ended it: a message arrived that is larger" \
        in str(failure.value)
    assert "Received data size doesn't match expected size" in str(failure.value)
    with redacted(), pytest.raises(CheckFailure) as failure:
        student.call_ranks("sends_more_than_is_received", case, world_size=2, timeout=2)
    assert "gloo ended it" in str(failure.value) and "Received data size" not in str(failure.value)
    assert "(not shown here: it could carry the hidden data)" in str(failure.value)


def test_call_ranks_fails_a_case_that_returns_with_a_receive_still_pending():
    student = InProcessStudent(notebook())
    with pytest.raises(CheckFailure, match=r"case 1 of 1: every rank returned, but then .* A receive posted with "
                                           r"dist\.irecv .* never waited on"):
        student.call_ranks("leaves_a_receive_pending", [[(np.ones(2),)] * 2], world_size=2, timeout=1)


def test_call_ranks_runs_real_processes_inside_the_grading_sandbox():
    """Forked ranks inside bubblewrap talk over the sandbox's own loopback; a hang ends at the wall timeout."""
    from aisys_grader.cleanroom import SandboxedRoom
    from aisys_grader.kernel import KernelStudent, SandboxedKernel
    from aisys_grader.sandbox import Sandbox

    source = ("import torch, torch.distributed as dist\n"
              "def shift(x):\n"
              "    r, p = dist.get_rank(), dist.get_world_size()\n"
              "    y = torch.empty_like(x); q = dist.isend(x.clone(), (r + 1) % p)\n"
              "    dist.recv(y, (r - 1) % p); q.wait(); x.copy_(y)\n"
              "def spin(x):\n    while True: pass\n")
    sandbox = Sandbox.create()
    with SandboxedKernel(sandbox) as kernel, SandboxedRoom(sandbox) as room:
        assert kernel.execute(source, 60).status == "ok"
        student = KernelStudent(kernel, room=room)
        student.sources.append(source)  # as the engine does: the cells the kernel ran
        outcomes = student.call_ranks("shift", [[(np.full(2, r, dtype=np.float64),) for r in range(5)]], world_size=5)
        assert [o["tensors"][0][0] for o in outcomes[0]] == [4, 0, 1, 2, 3]
        start = time.monotonic()
        with pytest.raises(CheckFailure, match="did not finish in time"):
            student.call_ranks("spin", [[(np.ones(1),)] * 2], world_size=2, wall_timeout=1)
        assert time.monotonic() - start < 10


def test_a_rank_that_could_not_join_the_group_is_started_again(monkeypatch, tmp_path):
    from aisys.collectives import launch

    join = launch._join

    def fails_once(rank, *rest):
        if rank == 1 and not (tmp_path / "failed").exists():
            (tmp_path / "failed").touch()
            raise RuntimeError("Gloo connectFullMesh failed: Connection closed by peer")
        join(rank, *rest)

    monkeypatch.setattr(launch, "_join", fails_once)
    assert run_ranks(lambda: dist.get_rank(), 2) == [0, 1]


def test_a_group_that_never_forms_fails_saying_so_after_a_few_starts(monkeypatch):
    from aisys.collectives import launch

    def never(*_):
        raise RuntimeError("client socket has timed out")

    monkeypatch.setattr(launch, "_join", never)
    with pytest.raises(RanksFailed, match="could not join the process group: RuntimeError: client socket"):
        run_ranks(lambda: None, 2)


def test_definitions_kept_notices_storage_the_student_s_code_keeps_between_calls():
    """A harness can tell whether the student's code kept something of its own: a module-level list appended to,
    a tensor written in place or one replaced by a larger one, a mutable default argument filled."""
    from aisys_grader.cleanroom import Definitions

    def cached(x, memo={}):  # noqa: B006 - the mutable default is the point
        memo[len(memo)] = x

    namespace = {"BUFFER": [], "TABLE": torch.zeros(4), "NESTED": {"a": [torch.zeros(2)]}, "cached": cached,
                 "torch": torch, "__name__": "__main__"}
    definitions = Definitions(namespace)
    before = definitions.kept()
    assert definitions.kept() == before
    for change in (lambda: namespace["BUFFER"].append(1), lambda: namespace["TABLE"].add_(1),
                   lambda: namespace["NESTED"]["a"].__setitem__(0, torch.zeros(9)), lambda: cached(1)):
        change()
        assert definitions.kept() != before
        before = definitions.kept()
