"""aisys_grader: the API checks are written with, the notebook pipeline, and the sandboxed grading engine.

By role:
- what a check author imports: `checks` (@check, compare_cases, compare_timed, require_gpu),
  `compare` (assert_close, CheckFailure, redaction), `launches` (SIMT reports), `low_precision`, `plain`,
  `speed` (a kernel timed on a GPU against the hardware's limit);
- the notebook pipeline: `exercise` (folders and specs), `generate`, `scaffold` (aisys-grader new),
  `notebook` (checks inside a student's notebook), `wrong` (known-wrong answers);
- the grading engine: `course` (aisys-grader grade), `intake`, `autograde`, `engine`, `kernel`, `bridge`,
  `shim`, `reps` (the speed checks' loop, next to the student's code), `student`, `cleanroom`, `grammar`,
  `job`, `sandbox`, `cgroups`, `records`, `export`, `inert`.

Checks are trusted code: when grading, they run in the grader's process and
reach student code only through `Student.call`, with plain data.
"""

import sys

# jsonschema, under nbformat, imports rfc3987_syntax where it is installed (jupyter-events asks for it), and that
# builds 38 Lark grammars at import: about 1.9 s of CPU in every process that reads a notebook, for the "iri"
# string formats no notebook schema uses. A None entry makes that optional import fail fast, as if not installed.
sys.modules.setdefault("rfc3987_syntax", None)

from .checks import Check, Result, check, checks_for, compare_cases, require_gpu, run
from .compare import CheckFailure, CheckSkipped, assert_close
from .notebook import checker
from .student import InProcessStudent, Student

__all__ = ["Check", "CheckFailure", "CheckSkipped", "InProcessStudent", "Result", "Student", "assert_close", "check",
           "checker", "checks_for", "compare_cases", "require_gpu", "run"]
