"""Run an exercise's known-wrong answers and grade each with every check's hidden cases, as test_exercises does.

    python tests/run_wrong_answers.py 02-gpu-programming/cuda_c [seeds, default 1,2,3]

For machines without the notebook tool chain (a GPU machine): each wrong answer's program (the
solution's jupytext source with the answer's edits, aisys_grader/wrong.py) runs cell by cell as
plain Python, its check cells left out and a cell that raises not stopping the rest, as in a
notebook; then the answer's code, if any. Each answer runs in a process of its own, since a wrong
kernel's illegal memory access would spoil the GPU context of everything after it.
Prints, per answer and seed, the checks that failed against those its `fails` lists ("skip"
where the checks cannot run here, e.g. without a GPU), and exits non-zero on any mismatch.
"""

import contextlib
import io
import linecache
import re
import subprocess
import sys
from pathlib import Path

from aisys_grader import InProcessStudent, checks_for, run, wrong

CELL = re.compile(r"^# %%(.*)\n", re.MULTILINE)  # a jupytext percent cell's first line: its kind and tags


def code_cells(program: str) -> list[str]:
    """The code cells of a jupytext percent program, the graded ones (tagged "check") left out."""
    parts = CELL.split(program)
    return [source for header, source in zip(parts[1::2], parts[2::2], strict=True)
            if "[markdown]" not in header and '"check"' not in header]


def program_namespace(name: str, cells: list[str]) -> dict:
    namespace = {"__name__": "__main__", "In": [""]}  # In: what the clean room runs again, as in IPython
    for i, code in enumerate(cells):
        filename = f"<{name}:{i}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)  # kernels need source
        namespace["In"].append(code)
        try:
            exec(compile(code, filename, "exec"), namespace)
        except Exception as error:  # a notebook goes on after a cell that raises
            print(f"{filename}: {type(error).__name__}: {error}", file=sys.stderr)
    return namespace


def grade_one(exercise: str, name: str, seeds: list[int]) -> int:
    answer = next(a for a in wrong.answers(exercise) if a.name == name)
    with contextlib.redirect_stdout(io.StringIO()):  # the notebook's own prints and measurements
        namespace = program_namespace(f"{exercise}:{name}",
                                      code_cells(wrong.wrong_program(exercise, answer)) + [answer.code])
    expected, student, mismatches = set(answer.fails), InProcessStudent(namespace), 0
    for seed in seeds:
        results = {check: run(c, student, hidden=True, seed=seed) for check, c in checks_for(exercise).items()}
        failed = {check for check, r in results.items() if r.failed}
        skipped = {check for check, r in results.items() if r.skipped}
        ok = failed == expected - skipped
        mismatches += not ok
        status = "MISMATCH" if not ok else "skip" if skipped else "ok"
        print(f"{status:8}  {name}, seed {seed}: failed {sorted(failed)}, fails {sorted(expected)}"
              + (f", skipped {sorted(skipped)}: {next(iter(results.values())).message}" if skipped else ""))
        for check in sorted(failed ^ (expected - skipped)):
            print(f"      {check}: {results[check].message[:400] or 'passed'}")
    return 1 if mismatches else 0


def main(exercise: str, seeds: str = "1,2,3") -> int:
    answers = wrong.answers(exercise)
    codes = [subprocess.run([sys.executable, __file__, exercise, seeds, answer.name], check=False).returncode
             for answer in answers]
    print(f"{exercise}: {codes.count(0)} of {len(codes)} wrong answers fail exactly their checks")
    return 1 if any(codes) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    if len(sys.argv) > 3:  # one answer, in this process
        sys.exit(grade_one(sys.argv[1], sys.argv[3], [int(s) for s in sys.argv[2].split(",")]))
    sys.exit(main(*sys.argv[1:3]))
