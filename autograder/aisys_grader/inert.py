"""Kernel outputs made inert: what a student's code printed reaches feedback and formgrader as text only.

Feedback pages and formgrader render a graded notebook's outputs with nbconvert, which writes
text/html, SVG, JavaScript and markdown into the page as markup, and an image's `width`, `height`
and `alt` metadata into its `<img>` tag. A kernel's outputs are the student's to forge, so each is
rebuilt from the fields nbconvert shows as escaped text: a stream's text, an error's name, value
and traceback, a result's text/plain, and PNG or JPEG data that is strict base64 (it is written
into an `<img src="data:...">` attribute). A result with neither text nor image (HTML, SVG,
JavaScript, markdown, LaTeX, widgets alone) becomes a short text note; no output keeps its metadata.
Lone surrogates, which JSON allows and UTF-8 cannot encode, become U+FFFD.
"""

import base64
import binascii
import re

import nbformat

IMAGES = ("image/png", "image/jpeg")
_SURROGATES = re.compile("[\ud800-\udfff]")


def text(value) -> str:
    """A string as UTF-8 can carry it; a notebook's list of lines is joined; anything else is no text."""
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        value = "".join(value)
    return _SURROGATES.sub("\ufffd", value) if isinstance(value, str) else ""


def outputs(raw) -> list:
    """Inert copies of a cell's outputs (see the module docstring)."""
    return [_inert(output) for output in (raw if isinstance(raw, list) else [])]


def _note(what: str):
    return nbformat.v4.new_output("display_data", data={"text/plain": f"[{what}: not shown in feedback]"})


def _inert(output):
    kind = output.get("output_type") if isinstance(output, dict) else None
    if kind == "stream":
        name = output.get("name") if output.get("name") in ("stdout", "stderr") else "stdout"
        return nbformat.v4.new_output("stream", name=name, text=text(output.get("text")))
    if kind == "error":
        lines = output.get("traceback") if isinstance(output.get("traceback"), list) else []
        return nbformat.v4.new_output("error", ename=text(output.get("ename")), evalue=text(output.get("evalue")),
                                      traceback=[text(line) for line in lines])
    if kind in ("display_data", "execute_result"):
        raw = output.get("data") if isinstance(output.get("data"), dict) else {}
        images = {mime: _base64(raw.get(mime)) for mime in IMAGES}
        data = {mime: image for mime, image in images.items() if image}
        if isinstance(raw.get("text/plain"), (str, list)):
            data["text/plain"] = text(raw["text/plain"])
        if not data:
            shown = ", ".join(sorted(text(str(mime))[:40] for mime in raw)[:5]) or "empty"
            return _note(f"an output of type {shown}")
        if kind == "display_data":
            return nbformat.v4.new_output("display_data", data=data)
        count = output.get("execution_count")
        return nbformat.v4.new_output("execute_result", data=data,
                                      execution_count=count if type(count) is int else None)
    return _note(f"an output of kind {text(str(kind))[:40]}")


def _base64(value) -> str | None:
    """The data without line breaks if it is strict base64, else None (it would leave its attribute)."""
    if not isinstance(value, str):
        return None
    data = "".join(value.split())
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data or None
