"""Plain data: the only values that cross between a check and student code.

Plain data is None, bool, int, float, str, lists of plain data, dicts with
str keys and plain values, and numpy arrays of numeric or bool dtype. Anything
else (an object whose __eq__ always says True, an ndarray subclass, a
generator) is refused, so a check compares values, never objects the student
controls. `encode`/`decode` carry plain data as JSON, arrays as raw bytes in
base64: no pickle, so decoding cannot run code.
"""

import base64
import json
import math

import numpy as np

# Kinds a check can declare for a result.
KINDS = {"any", "number", "integer", "boolean", "string", "array", "list", "mapping", "none"}


class NotPlain(TypeError):
    """A value that is not plain data, or not of the declared kind."""


def kind_of(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, np.ndarray):
        return "array"
    if isinstance(value, list):
        return "list"
    return "mapping"


def to_plain(value, path: str = "result"):
    """A fresh copy of `value` made of exact builtin types and base ndarrays; NotPlain if it cannot be."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        return value.item()
    if type(value) is np.ndarray:
        if value.dtype.kind not in "biuf":
            raise NotPlain(f"{path} is an array of dtype {value.dtype}; expected numbers or booleans")
        return np.array(value, copy=True, order="C")
    if type(value).__module__ == "torch" and type(value).__name__ == "Tensor":  # exact torch.Tensor only
        tensor = value.detach().cpu()
        if not tensor.dtype.is_complex and tensor.dtype.itemsize == 2 and tensor.dtype.is_floating_point:
            tensor = tensor.float()  # numpy has no bfloat16; float32 holds fp16 and bf16 exactly
        return to_plain(tensor.numpy(), path)
    if type(value) in (list, tuple):
        return [to_plain(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if type(value) is dict:
        for key in value:
            if type(key) is not str:
                raise NotPlain(f"{path} has a key of type {type(key).__name__}; expected str keys")
        return {key: to_plain(item, f"{path}[{key!r}]") for key, item in value.items()}
    raise NotPlain(f"{path} is a {type(value).__module__}.{type(value).__qualname__}, which is not plain data "
                   "(numbers, strings, lists, dicts with str keys, numpy arrays)")


def require(value, kind: str, path: str = "result"):
    """`value` as plain data of `kind` (integers count as numbers); NotPlain otherwise."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    value = to_plain(value, path)
    got = kind_of(value)
    if kind in ("any", got) or (kind == "number" and got == "integer"):
        return value
    raise NotPlain(f"{path} is {got} data ({type(value).__name__}); expected {kind}")


def _encode(value):
    if isinstance(value, np.ndarray):
        return {"__array__": {"dtype": value.dtype.str, "shape": list(value.shape),
                              "data": base64.b64encode(value.tobytes()).decode("ascii")}}
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    if isinstance(value, list):
        return [_encode(item) for item in value]
    if isinstance(value, dict):
        return {"__dict__": {key: _encode(item) for key, item in value.items()}}
    return value


def _decode(data):
    if isinstance(data, list):
        return [_decode(item) for item in data]
    if isinstance(data, dict):
        (tag, body), = data.items()
        if tag == "__array__":
            array = np.frombuffer(base64.b64decode(body["data"]), dtype=np.dtype(body["dtype"]))
            return array.reshape(body["shape"]).copy()
        if tag == "__float__":
            return float(body)
        return {key: _decode(item) for key, item in body.items()}
    return data


def encode(value) -> str:
    """Plain data as a JSON string."""
    return json.dumps(_encode(to_plain(value)), allow_nan=False)


def decode(text: str):
    """The plain data `encode` wrote."""
    return _decode(json.loads(text))
