"""The one way checks reach student code: call a named function with plain data, get plain data back.

`Student` is the interface. `InProcessStudent` implements it over a notebook's
namespace for a student's self-check in JupyterLab; the grading engine
implements the same interface across a process boundary into a sandboxed
kernel. Both carry arguments and results through `plain.encode`/`decode`, so
a check behaves the same either way.
"""

from typing import Any, Protocol

from . import plain
from .compare import CheckFailure


class Student(Protocol):
    def call(self, function: str, *args, returns: str = "any", **kwargs) -> Any:
        """Call the student's `function` and return its result as plain data of kind `returns`.

        Raises CheckFailure when the function is missing, not implemented, raises, or returns
        something that is not plain data of that kind.
        """


class InProcessStudent:
    """Student code living in a namespace of this process (a notebook's globals)."""

    def __init__(self, namespace: dict):
        self.namespace = namespace

    def call(self, function: str, *args, returns: str = "any", **kwargs) -> Any:
        __tracebackhide__ = True
        target = self.namespace.get(function)
        if not callable(target):
            raise CheckFailure(f"`{function}` is not defined: run the cell that defines it first")
        # Fresh copies through the wire format: the student can neither mutate nor keep our inputs.
        args, kwargs = plain.decode(plain.encode([list(args), kwargs]))
        try:
            result = target(*args, **kwargs)
        except NotImplementedError:
            raise CheckFailure(f"`{function}` is not implemented yet (it raises NotImplementedError)") from None
        except Exception as error:
            raise CheckFailure(f"`{function}` raised {type(error).__name__}: {error}") from error
        try:
            return plain.decode(plain.encode(plain.require(result, returns, f"the result of `{function}`")))
        except plain.NotPlain as error:
            raise CheckFailure(str(error)) from None
