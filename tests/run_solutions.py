"""Run exercise solutions and grade them with every check, visible and hidden, in this process.

    python tests/run_solutions.py 02-gpu-programming [seed]
    python tests/run_solutions.py 02-gpu-programming/cuda_c [seed]

For machines without the notebook tool chain, such as a GPU machine used to show that
the checks pass there too: each solution source (a jupytext .py file, which is plain
Python) runs as a script, its kernels launched through numba-cuda where a GPU is in use.
Prints one line per check ("skip" for a check that cannot run here, such as a GPU-only
check without a GPU) and exits non-zero when any fails.
"""

import linecache
import sys
import time
from pathlib import Path

from aisys_grader import InProcessStudent, checks_for, run

ROOT = Path(__file__).resolve().parents[1]


def solution_namespace(path: Path) -> dict:
    code = path.read_text()
    linecache.cache[str(path)] = (len(code), None, code.splitlines(keepends=True), str(path))  # kernels need source
    namespace = {"__name__": "__main__", "In": ["", code]}  # In: what the clean room runs again, as in IPython
    exec(compile(code, str(path), "exec"), namespace)
    return namespace


def main(chapter: str, seed: int = 1) -> int:
    chapter, _, only = chapter.partition("/")
    failures = 0
    for path in sorted((ROOT / "solutions" / chapter).glob(f"{only or '*'}/notebook.py")):
        exercise = f"{chapter}/{path.parent.name}"
        start = time.perf_counter()
        student = InProcessStudent(solution_namespace(path), exercise)
        for hidden in (False, True):
            for name, check in checks_for(exercise).items():
                result = run(check, student, hidden=hidden, seed=seed)
                failures += result.failed
                status = "pass" if result.passed else "skip" if result.skipped else "FAIL"
                print(f"{status}  {exercise}:{name} ({'hidden' if hidden else 'visible'})"
                      + ("" if result.passed else f": {result.message}"))
        print(f"      {exercise}: {time.perf_counter() - start:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1))
