"""The student's side of the bridge: call a named function with plain data; reply with plain data.

`reply(...)` is the one implementation of calling student code. The in-process
student (student.py) calls it directly; in a grading kernel the grader runs
`call(...)`, which publishes the reply as display data for the grader to read.
Replies are untrusted either way: the grader re-checks every value.
"""

import contextlib
import sys

from . import plain

MIME = "application/vnd.aisys.reply+json"


def _synchronize_gpus():
    """Finish queued GPU work, so that a call's time on the grader's clock includes it."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # is_initialized first: it never initialises CUDA itself
        torch.cuda.synchronize()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.cuda.get_current_stream().synchronize()
        except Exception:
            pass  # CuPy without a usable GPU: nothing was queued


def _profiling(profile: bool):
    """Kernels launched inside run in the SIMT simulator, which reports on each (see aisys.simt)."""
    if not profile:
        return contextlib.nullcontext([])
    from aisys import simt

    return simt.profile()


def _on_ranks(target, cases: list, ranks: dict) -> list:
    """Run target on ranks["world_size"] processes, case after case (see student.Student.call_ranks)."""
    from aisys.collectives import launch

    world_size, backend = ranks["world_size"], ranks["backend"]
    per_rank = [[case[rank] for case in cases] for rank in range(world_size)]
    results = launch.run_ranks(_cases_on_one_rank, world_size, [(target, mine, backend) for mine in per_rank],
                               backend=backend, timeout=ranks["timeout"], wall_timeout=ranks["wall_timeout"])
    if any(result == "not_implemented" for result in results):
        raise NotImplementedError
    return [[results[rank][i] for rank in range(world_size)] for i in range(min(map(len, results)))]


def _cases_on_one_rank(target, cases: list, backend: str) -> list | str:
    """In one rank: each case's arrays become tensors; record the messages of the call. Stops at the first
    case that raised on this rank, and after any case that raised on another (the barrier between fails)."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from aisys.collectives import traffic
    from aisys.collectives.launch import error_text, rank_device

    device = rank_device(backend)
    outcomes = []
    for args in cases:
        tensors = [torch.from_numpy(a).to(device) if isinstance(a, np.ndarray) else a for a in args]
        outcome = {"value": None, "tensors": [], "messages": [], "error": None}
        try:
            with traffic.record() as recorded:
                value = target(*tensors)
            outcome["value"] = plain.to_plain(value, "the result")
            outcome["tensors"] = [plain.to_plain(t, "an argument") for t in tensors if isinstance(t, torch.Tensor)]
        except NotImplementedError:
            return "not_implemented"
        except BaseException as error:  # SystemExit too: report it as this rank's outcome
            outcome["error"] = error_text(error)
        outcome["messages"] = [m.to_plain() for m in recorded.messages]
        outcomes.append(outcome)
        if outcome["error"]:
            break
        try:
            dist.barrier()  # keep the cases apart: no message of one case is taken by a receive of the next
        except Exception:
            break
    return outcomes


def reply(namespace: dict, function: str, payload: str, returns: str, profile: bool = False,
          ranks: dict | None = None) -> dict:
    """Call namespace[function] on the plain arguments in `payload`; say what happened, as plain data.

    With `profile`, kernels it launches run in the SIMT simulator and the reply carries their reports.
    With `ranks`, it runs on real processes instead: see student.Student.call_ranks.
    """
    target = namespace.get(function)
    if not callable(target):
        return {"status": "not_defined"}
    args, kwargs = plain.decode(payload)
    try:
        if ranks:
            result = _on_ranks(target, args[0], ranks)
        else:
            with _profiling(profile) as launches:
                result = target(*args, **kwargs)
            _synchronize_gpus()
    except NotImplementedError:
        return {"status": "not_implemented"}
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: a graded call never ends the kernel
        return {"status": "raised", "error": type(error).__name__, "message": str(error)[:2000]}
    try:
        answer = {"status": "ok", "value": plain.encode(plain.require(result, returns, f"the result of `{function}`"))}
    except plain.NotPlain as error:
        return {"status": "not_plain", "message": str(error)}
    if profile:
        answer["launches"] = plain.encode([report.to_plain() for report in launches])
    return answer


def call(namespace: dict, function: str, payload: str, returns: str, nonce: str, profile: bool = False,
         ranks: dict | None = None) -> None:
    """In a grading kernel: publish the reply, tagged with the grader's nonce."""
    from IPython.display import publish_display_data

    publish_display_data({MIME: {**reply(namespace, function, payload, returns, profile, ranks), "nonce": nonce}})
