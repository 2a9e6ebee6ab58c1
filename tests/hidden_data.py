"""Watching failure messages for hidden data: not the inputs, not what the student's code returned.

test_exercises.py grades every known-wrong answer of every exercise on hidden cases through
`grade_watching` (for one of its seeds), in this process, while
a recording student keeps every argument the checks pass to the student's functions and everything the
student's code gives back (return values, the tensors and values of every rank, the text of what it
raised). A hidden case's inputs are the secret; what the student's code returns can be a copy of them,
and the reference's answer differs from a wrong answer only here and there, so the two together stand
for everything a message must not show. Then every failure message is searched for that data: each
check's against everything recorded up to it, since a later check's student code may hold earlier data.

What counts as showing the data (numbers are read from the message as tokens, so that every way of
printing them counts: repr, str, `:g`, `:.6g`, `:.4g`, numpy's array2string at any precision):
- a token stands for a value when the value rounds to it at the token's own precision, and either the
  token has at least 3 significant digits or the value is exactly what the token says (so a relative
  error printed as `0.31` does not stand for a hidden 0.3127...). Tokens that are the check's own
  measurements (right after "relative error", "rtol=", "atol=", "p-value") stand for nothing;
- an array, or a list of numbers, shows its data when 3 tokens of the message, separated only by
  commas, blanks and square brackets (as numpy and Python print arrays and lists), stand for 3
  consecutive elements of it, not all of them inf or NaN. Where all three are small integers
  (|v| <= 64) they must also lie inside one pair of square brackets: shapes, indices and positions,
  which a message may show, print as tuples in parentheses or as single numbers;
- a scalar shows its data when one token stands for it, if it is a non-integral float or an integer with
  |v| > 64 that is no size: not a dimension, element count or length of any array or list seen in the
  same grading run (a message may state sizes), and not a power of two up to 2**20 (block sizes,
  thread counts, and the sizes messages name by rule);
- a string of more than 3 characters shows itself when it appears in the message as it is. Mapping keys
  are structure, not data; and a string that is one of the exercise's own words (a dtype name, or a string
  constant of the check module or of an aisys module it imports: an op, an order, an algorithm, the kind of
  a recorded message) names the kind of a case, as a dtype does, and may be said; so does the name of one
  of Python's own exceptions (compare.exception_name shows those);
- what the student's code raised shows itself when its text (its first 40 characters) appears.

What this cannot see, and the audit of the check modules covers: the reference's expected answer is not
recorded (it never crosses the bridge), though a wrong answer's result shares most of its values with it,
so a message printing both is caught through `got`; a value that merely derives from the data (a sum, a
tolerance computed from it); round numbers (fewer than 3 significant digits) and small integers outside
square brackets, which honest messages are full of; and cases that no known-wrong answer fails.
"""

import ast
import builtins
import importlib.util
import math
import re

import numpy as np

from aisys_grader import checks_for
from aisys_grader.student import InProcessStudent
from aisys_grader import checks as checks_module
from aisys_grader.exercise import module_name
from aisys_grader import plain

DTYPE_NAMES = {"float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
               "fp64", "fp32", "fp16", "bf16", "fp8", "int4", "tf32", "float8", "e4m3", "e5m2"}


class RecordingStudent(InProcessStudent):
    """An in-process student that keeps every argument it was given and everything its code gave back."""

    def __init__(self, namespace: dict, exercise: str | None = None):
        super().__init__(namespace, exercise)
        self.given: list = []  # the arguments, as plain data
        self.returned: list = []  # what came back, as plain data
        self.said: list[str] = []  # text of exceptions the student's code raised

    def _reply(self, function, data, returns):
        reply, seconds = super()._reply(function, data, returns)
        return self._record(data, reply), seconds

    def _room(self, function, dialect, data, returns, ranks=None, generated=()):
        return self._record(data, super()._room(function, dialect, data, returns, ranks, generated), ranks)

    def _record(self, data: str, reply: dict, ranks: dict | None = None) -> dict:
        self.given.append(plain.decode(data))
        if reply.get("status") == "ok":
            self.returned.append(plain.decode(reply["value"]))
            if ranks:  # each rank's error text is what its code said
                for case in self.returned[-1]:
                    self.said += [outcome["error"] for outcome in case if isinstance(outcome.get("error"), str)]
        elif reply.get("status") in ("raised", "not_plain"):
            self.said.append(str(reply.get("message", "")))
        return reply


# --- reading numbers out of a message ---------------------------------------------------------------

NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w])|(?<!\w)[-+]?(?:nan|inf)(?!\w)")


def _token_precision(text: str) -> tuple[float, float, int]:
    """(value, half a unit in the token's last digit, significant digits)."""
    value = float(text)
    mantissa, _, exponent = text.lower().lstrip("+-").partition("e")
    exponent = int(exponent) if exponent else 0
    decimals = len(mantissa.partition(".")[2])
    digits = mantissa.replace(".", "").lstrip("0")
    if not mantissa.partition(".")[2] and "." not in mantissa:
        digits = digits.rstrip("0") or "0"  # 1200 may be 1.2e3 printed
        if not digits.strip("0"):
            digits = "1"
    half = 0.5 * 10.0 ** (exponent - decimals)
    return value, half, max(len(digits), 1)


MEASURED = re.compile(r"(relative error|rtol=|atol=|p-value)\s*$")  # what the check measured, not data
SEPARATOR = re.compile(r"[\s,\[\]]*")  # between elements of a printed array or list


def _tokens(message: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group()) for m in NUMBER.finditer(message)
            if not MEASURED.search(message[max(0, m.start() - 20):m.start()])]


def _stands_for(token: str, values: np.ndarray) -> np.ndarray:
    """Which of `values` (float64) a number token stands for (see the module docstring)."""
    if token.lstrip("+-") in ("nan", "inf"):
        return np.isnan(values) if "nan" in token else values == float(token)
    value, half, digits = _token_precision(token)
    near = np.abs(values - value) <= half * (1 + 1e-9) + 1e-300
    if digits >= 3:
        return near
    return near & (np.abs(values - value) <= 1e-12 * np.maximum(np.abs(values), 1e-300))


def _in_brackets(message: str, start: int, end: int) -> bool:
    """Whether message[start:end] lies inside one pair of square brackets (an array or list as printed)."""
    opened = message.rfind("[", 0, start)
    inside = message[opened + 1:end]
    return opened >= 0 and not any(c in inside for c in "[]()") and message.find("]", end) >= 0


# --- the secrets of one grading run -----------------------------------------------------------------

def vocabulary(exercise: str) -> set[str]:
    """The string constants of the exercise's check module and of the aisys modules it imports."""
    module = importlib.import_module(module_name(exercise))
    sources, words = [module.__file__], set()
    for node in ast.walk(ast.parse(open(module.__file__).read())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [f"{node.module}.{a.name}" for a in node.names] + [node.module] \
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aisys") else []
        for name in names:
            try:
                spec = importlib.util.find_spec(name) if name.startswith("aisys") else None
            except (ImportError, ValueError):
                spec = None
            if spec and spec.origin and spec.origin.endswith(".py"):
                sources.append(spec.origin)
    for source in sources:
        words |= {n.value for n in ast.walk(ast.parse(open(source).read()))
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return words


class Secrets:
    def __init__(self, vocabulary: set[str] = frozenset()):
        self.sequences: list[np.ndarray] = []
        self.scalars: list[float] = []
        self.strings: set[str] = set()
        self.sizes: set[int] = set()
        self.vocabulary = vocabulary

    def add(self, value):
        """Record the data of `value`, an argument or what came back (see the module docstring)."""
        if isinstance(value, np.ndarray):
            self.sizes |= {int(d) for d in value.shape} | {int(value.size)}
            if value.size >= 3:
                self.sequences.append(value.astype(np.float64).ravel())
            elif value.size:
                for v in value.ravel().tolist():
                    self.add(v)
        elif isinstance(value, dict):
            for item in value.values():
                self.add(item)
        elif isinstance(value, list):
            self.sizes.add(len(value))
            numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if len(numbers) == len(value) and len(value) >= 3:
                self.sequences.append(np.array(numbers, dtype=np.float64))
            else:
                for item in value:
                    self.add(item)
        elif isinstance(value, str):
            builtin = isinstance(getattr(builtins, value, None), type) and issubclass(getattr(builtins, value),
                                                                                    BaseException)
            if len(value) > 3 and value.lower() not in DTYPE_NAMES and value not in self.vocabulary and not builtin:
                self.strings.add(value)
        elif isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, (int, float)):
            if math.isfinite(value) and (not float(value).is_integer() or abs(value) > 64):
                self.scalars.append(float(value))

    def leaks(self, message: str, said: list[str]) -> list[str]:
        found = []
        tokens = _tokens(message)
        scalars = np.array([v for v in self.scalars if not (float(v).is_integer() and (
            int(v) in self.sizes or (int(v) > 0 and int(v) & (int(v) - 1) == 0 and v <= 2 ** 20)))])
        for _, _, text in tokens:
            if scalars.size and _stands_for(text, scalars).any():
                found.append(f"the scalar {text}")
        for i in range(len(tokens) - 2):
            window = tokens[i:i + 3]
            if not all(SEPARATOR.fullmatch(message[a[1]:b[0]]) for a, b in zip(window, window[1:])):
                continue
            texts = [t for _, _, t in window]
            for sequence in self.sequences:
                if sequence.size < 3:
                    continue
                masks = [_stands_for(t, sequence) for t in texts]
                run = masks[0][:-2] & masks[1][1:-1] & masks[2][2:]
                if not run.any():
                    continue
                at = int(np.argmax(run))
                if not np.isfinite(sequence[at:at + 3]).any():
                    continue
                small = all(float(v).is_integer() and abs(v) <= 64 for v in sequence[at:at + 3])
                if small and not _in_brackets(message, window[0][0], window[2][1]):
                    continue
                found.append(f"the run {', '.join(texts)} (elements {at}..{at + 2} of a sequence of {sequence.size})")
                break
        found += [f"the string {s!r}" for s in self.strings if s in message]
        found += [f"the student's own text {s[:40]!r}" for s in said if len(s) > 3 and s[:40] in message]
        return found


def grade_watching(exercise: str, scope: dict, seed: int) -> tuple[dict, dict[str, list[str]]]:
    """Grade `scope` on hidden cases, as notebooks.grade does, watching for hidden data in the failure messages:
    the results by check name, and {check: what its message showed of the hidden data}."""
    student, words = RecordingStudent(scope, exercise), vocabulary(exercise)
    results, leaks = {}, {}
    for name, check in checks_for(exercise).items():
        result = results[name] = checks_module.run(check, student, hidden=True, seed=seed)
        if not result.failed:
            continue
        secrets = Secrets(words)
        for value in student.given + student.returned:  # all so far: later code may hold earlier data
            secrets.add(value)
        if found := secrets.leaks(result.message, student.said):
            leaks[name] = found + [f"in: {result.message[:600]}"]
    return results, leaks
