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
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
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


def reply(namespace: dict, function: str, payload: str, returns: str, profile: bool = False) -> dict:
    """Call namespace[function] on the plain arguments in `payload`; say what happened, as plain data.

    With `profile`, kernels it launches run in the SIMT simulator and the reply carries their reports.
    """
    target = namespace.get(function)
    if not callable(target):
        return {"status": "not_defined"}
    args, kwargs = plain.decode(payload)
    try:
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


def call(namespace: dict, function: str, payload: str, returns: str, nonce: str, profile: bool = False) -> None:
    """In a grading kernel: publish the reply, tagged with the grader's nonce."""
    from IPython.display import publish_display_data

    publish_display_data({MIME: {**reply(namespace, function, payload, returns, profile), "nonce": nonce}})
