"""The student's side of the bridge: call a named function with plain data; reply with plain data.

`reply(...)` is the one implementation of calling student code. The in-process
student (student.py) calls it directly; in a grading kernel the grader runs
`call(...)`, which publishes the reply as display data for the grader to read.
Replies are untrusted either way: the grader re-checks every value. Nothing that runs
here reports how the code ran (launch reports, messages): that is the clean room's job
(cleanroom.py), out of the student's reach.
"""

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


def raised_in(error: BaseException, namespace: dict) -> str | None:
    """The qualified name of the innermost function of the notebook (its globals are `namespace`) that `error` went
    through: where a provided driver called a function the student has not written yet."""
    where, frame = None, error.__traceback__
    while frame is not None:
        if frame.tb_frame.f_globals is namespace and frame.tb_frame.f_code.co_name != "<module>":
            where = frame.tb_frame.f_code.co_qualname
        frame = frame.tb_next
    return where


def reply(namespace: dict, function: str, payload: str, returns: str) -> dict:
    """Call namespace[function] on the plain arguments in `payload`; say what happened, as plain data."""
    target = namespace.get(function)
    if not callable(target):
        return {"status": "not_defined"}
    args, kwargs = plain.decode(payload)
    try:
        result = target(*args, **kwargs)
        _synchronize_gpus()
    except NotImplementedError as error:
        return {"status": "not_implemented", "where": raised_in(error, namespace)}
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: a graded call never ends the kernel
        return {"status": "raised", "error": type(error).__name__, "message": str(error)[:2000]}
    try:
        return {"status": "ok", "value": plain.encode(plain.require(result, returns, f"the result of `{function}`"))}
    except plain.NotPlain as error:
        return {"status": "not_plain", "message": str(error)}


def call(namespace: dict, function: str, payload: str, returns: str, nonce: str) -> None:
    """In a grading kernel: publish the reply, tagged with the grader's nonce."""
    from IPython.display import publish_display_data

    publish_display_data({MIME: {**reply(namespace, function, payload, returns), "nonce": nonce}})
