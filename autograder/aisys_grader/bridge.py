"""The student's side of the bridge: call a named function with plain data; reply with plain data.

`reply(...)` is the one implementation of calling student code. The in-process
student (student.py) calls it directly; in a grading kernel the grader runs
`call(...)`, which publishes the reply as display data for the grader to read.
Replies are untrusted either way: the grader re-checks every value. Nothing that runs
here reports how the code ran (launch reports, messages): that is the clean room's job
(cleanroom.py), out of the student's reach. With `harness="reps"` the function runs in
the timing loop of reps.py, whose reply the grader checks and times itself (speed.py).
"""

import linecache
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


def _innermost_in_notebook(error: BaseException, namespace: dict):
    """The innermost traceback entry of `error` in a function of the notebook (its globals are `namespace`), or
    None: the student's own code, past any library or provided driver it went through."""
    found, entry = None, error.__traceback__
    while entry is not None:
        if entry.tb_frame.f_globals is namespace and entry.tb_frame.f_code.co_name != "<module>":
            found = entry
        entry = entry.tb_next
    return found


def raised_in(error: BaseException, namespace: dict) -> str | None:
    """The qualified name of the innermost notebook function `error` went through: where a provided driver called a
    function the student has not written yet."""
    entry = _innermost_in_notebook(error, namespace)
    return entry.tb_frame.f_code.co_qualname if entry else None


def raised_where(error: BaseException, namespace: dict) -> str:
    """The notebook's line that raised: 'in f, line 3: x = y[9]', or ''. Only unredacted messages show it: the reply
    is the student's to forge, so it could carry hidden data."""
    entry = _innermost_in_notebook(error, namespace)
    if entry is None:
        return ""
    code = entry.tb_frame.f_code
    line = linecache.getline(code.co_filename, entry.tb_lineno).strip()
    return f"in {code.co_qualname}, line {entry.tb_lineno}" + (f": {line}" if line else "")


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
    except NotImplementedError as error:
        return {"status": "not_implemented", "where": raised_in(error, namespace)}
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: a graded call never ends the kernel
        return {"status": "raised", "error": type(error).__name__, "message": str(error)[:2000],
                "where": raised_where(error, namespace)}
    try:
        return {"status": "ok", "value": plain.encode(plain.require(result, returns, f"the result of `{function}`"))}
    except plain.NotPlain as error:
        return {"status": "not_plain", "message": str(error)}


def call(namespace: dict, function: str, payload: str, returns: str, nonce: str, harness: str | None = None) -> None:
    """In a grading kernel: publish the reply, tagged with the grader's nonce."""
    from IPython.display import publish_display_data

    publish_display_data({MIME: {**reply(namespace, function, payload, returns, harness), "nonce": nonce}})
