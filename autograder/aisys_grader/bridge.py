"""The student's side of the bridge: call a named function with plain data; reply with plain data.

`reply(...)` is the one implementation of calling student code. The in-process
student (student.py) calls it directly; in a grading kernel the grader runs
`call(...)`, which publishes the reply as display data for the grader to read.
Replies are untrusted either way: the grader re-checks every value. Nothing that runs
here reports how the code ran (launch reports, messages): that is the clean room's job
(cleanroom.py), out of the student's reach. With `harness="reps"` the function runs in
the timing loop of reps.py, whose reply the grader checks and times itself (speed.py).
"""

import sys
import sysconfig
import traceback
from pathlib import Path

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


# Frames in these folders are libraries' (Python's, numpy's, triton's, aisys's), never the student's code.
_LIBRARIES = tuple({sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
                   | {str(Path(__file__).parents[1]), str(Path(plain.__file__).parents[2] / "src")})


def _where(error: BaseException) -> str:
    """The student's line that raised (the innermost frame outside libraries): 'in f, line 3: x = y[9]', or ''.
    Only unredacted messages show it: the reply is the student's to forge, so it could carry hidden data."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)[1:] if not f.filename.startswith(_LIBRARIES)]
    if not frames:
        return ""
    frame, line = frames[-1], (frames[-1].line or "").strip()
    return f"in {frame.name}, line {frame.lineno}" + (f": {line}" if line else "")


def reply(namespace: dict, function: str, payload: str, returns: str, harness: str | None = None) -> dict:
    """Call namespace[function] on the plain arguments in `payload` (with a harness: the harness, on the function
    and those arguments); say what happened, as plain data."""
    target = namespace.get(function)
    if not callable(target):
        return {"status": "not_defined"}
    args, kwargs = plain.decode(payload)
    if harness == "reps":
        from . import reps

        args, target = (target, *args), reps.run
    elif harness is not None:
        return {"status": "raised", "error": "ValueError", "message": f"no harness {harness!r}"}
    try:
        result = target(*args, **kwargs)
        _synchronize_gpus()
    except NotImplementedError:
        return {"status": "not_implemented"}
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: a graded call never ends the kernel
        return {"status": "raised", "error": type(error).__name__, "message": str(error)[:2000],
                "where": _where(error)}
    try:
        return {"status": "ok", "value": plain.encode(plain.require(result, returns, f"the result of `{function}`"))}
    except plain.NotPlain as error:
        return {"status": "not_plain", "message": str(error)}


def call(namespace: dict, function: str, payload: str, returns: str, nonce: str, harness: str | None = None) -> None:
    """In a grading kernel: publish the reply, tagged with the grader's nonce."""
    from IPython.display import publish_display_data

    publish_display_data({MIME: {**reply(namespace, function, payload, returns, harness), "nonce": nonce}})
