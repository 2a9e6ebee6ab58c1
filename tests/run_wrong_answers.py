"""Run an exercise's known-wrong answers and grade each with every check's hidden cases, as test_exercises does.

    python tests/run_wrong_answers.py 02-gpu-programming/cuda_c [seeds, default 1,2,3]

For machines without the notebook tool chain (a GPU machine): each wrong answer runs after
the solution source (plain Python, see run_solutions.py), in a process of its own, since a
wrong kernel's illegal memory access would spoil the GPU context of everything after it.
Prints, per answer and seed, the checks that failed against those its FAILS lists ("skip"
where the checks cannot run here, e.g. without a GPU), and exits non-zero on any mismatch.
"""

import contextlib
import io
import linecache
import subprocess
import sys
from pathlib import Path

from aisys_grader import InProcessStudent, checks_for, run
from run_solutions import ROOT, solution_namespace


def grade_one(exercise: str, answer: Path, seeds: list[int]) -> int:
    with contextlib.redirect_stdout(io.StringIO()):  # the notebook's own prints and measurements
        namespace = solution_namespace(ROOT / "solutions" / exercise / "notebook.py")
        code = answer.read_text()
        linecache.cache[str(answer)] = (len(code), None, code.splitlines(keepends=True), str(answer))
        exec(compile(code, str(answer), "exec"), namespace)
    expected, student, mismatches = set(namespace["FAILS"]), InProcessStudent(namespace), 0
    for seed in seeds:
        results = {name: run(check, student, hidden=True, seed=seed) for name, check in checks_for(exercise).items()}
        failed = {name for name, r in results.items() if r.failed}
        skipped = {name for name, r in results.items() if r.skipped}
        ok = failed == expected - skipped
        mismatches += not ok
        status = "MISMATCH" if not ok else "skip" if skipped else "ok"
        print(f"{status:8}  {answer.stem}, seed {seed}: failed {sorted(failed)}, FAILS {sorted(expected)}"
              + (f", skipped {sorted(skipped)}: {next(iter(results.values())).message}" if skipped else ""))
        for name in sorted(failed ^ (expected - skipped)):
            print(f"      {name}: {results[name].message[:400] or 'passed'}")
    return 1 if mismatches else 0


def main(exercise: str, seeds: str = "1,2,3") -> int:
    answers = sorted((ROOT / "tests" / "wrong_answers" / exercise).glob("*.py"))
    if not answers:
        raise SystemExit(f"no wrong answers in tests/wrong_answers/{exercise}")
    codes = [subprocess.run([sys.executable, __file__, exercise, seeds, str(answer)]).returncode for answer in answers]
    print(f"{exercise}: {codes.count(0)} of {len(codes)} wrong answers fail exactly their checks")
    return 1 if any(codes) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    if len(sys.argv) > 3:  # one answer, in this process
        sys.exit(grade_one(sys.argv[1], Path(sys.argv[3]), [int(s) for s in sys.argv[2].split(",")]))
    sys.exit(main(*sys.argv[1:3]))
