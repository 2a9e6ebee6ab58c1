"""The speed checks on a GPU: every exercise's solution and known-wrong answers against them, as one table.

    python tests/speed_table.py [chapter/name ...]   # default: every exercise with speed checks

Each exercise runs in processes of its own. Its solution and its known-wrong answers run as programs (the
notebook's cells, as run_wrong_answers.py runs them, without the cells that time things themselves), then:

1. every answer whose `fails` lists no speed check is called in the timing loop as speed.py's warm-up calls it
   (two repetitions, results checked) to learn whether it is right on the speed checks' inputs: a wrong one must
   list the speed checks; a right one is the solution's kernel with a mistake elsewhere, and is not timed. The
   exercises do this at once, in parallel: nothing is timed.
2. Then, one exercise after another, the GPU to themselves, the solution is graded by every speed check, and each
   answer whose `fails` lists speed checks by those: a row each, with the fraction of the limit measured.

A speed check is one whose name ends in `_speed`. Exits non-zero where an answer fails other speed checks than
its `fails` lists, or the solution fails one.
"""

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

from aisys_grader import InProcessStudent, checks_for, run, speed, wrong
from run_wrong_answers import code_cells, program_namespace

ROOT = Path(__file__).resolve().parents[1]
TIMES_ITSELF = re.compile(r"bench\.measure|do_bench|^\s+measure\(\)", re.MULTILINE)  # cells that time on their own
CONTEXT_LOST = 16  # exit status + the answer's index: the next process starts after it


def speed_checks(exercise: str) -> dict:
    return {name: c for name, c in checks_for(exercise).items() if name.endswith("_speed")}


def namespace(exercise: str, answer=None) -> dict:
    program = wrong.wrong_program(exercise, answer) if answer else wrong.solution_program(exercise)
    cells = [c for c in code_cells(program) if not TIMES_ITSELF.search(c)] + [answer.code if answer else ""]
    with contextlib.redirect_stdout(io.StringIO()):
        return program_namespace(f"{exercise}:{answer.name if answer else 'solution'}", cells)


def workloads(exercise: str) -> list:
    module = sys.modules[checks_for(exercise)[next(iter(speed_checks(exercise)))].function.__module__]
    return [w for w in vars(module).values() if isinstance(w, speed.Workload)]


def right_or_wrong(exercise: str, skip: int = 0) -> int:
    """Step 1 for one exercise; the first `skip` answers left out (they ran in a process whose GPU context a wrong
    kernel spoiled)."""
    timed, mismatches = speed_checks(exercise), 0
    for i, answer in enumerate(wrong.answers(exercise)):
        if i < skip or set(answer.fails) & set(timed):
            continue
        student = InProcessStudent(namespace(exercise, answer), exercise)
        for workload in workloads(exercise):
            try:
                for choice in workload.choices(student) if workload.choices else [{}]:
                    speed._checked_call(student, workload, choice, 2, float("inf"), "the warm-up call")
                verdict, right = "right", True
            except Exception as error:  # a CheckFailure, or a kernel that does not run at this size
                verdict, right = f"wrong ({str(error)[:200]})", False
                if "CUDA error" in str(error) or "illegal" in str(error):
                    print(f"{exercise}:{answer.name}: the GPU context is lost ({error}); going on in a new process")
                    return CONTEXT_LOST + i
            listed = [name for name in timed if name in answer.fails and name in _checks_of(exercise, workload)]
            ok = right == (not listed)
            mismatches += not ok
            print(f"{'ok' if ok else 'MISMATCH':8}  {exercise}:{answer.name} on {workload.function}: {verdict}; "
                  f"fails lists {listed or 'none of its speed checks'}", flush=True)
    return 1 if mismatches else 0


def timed_rows(exercise: str) -> int:
    """Step 2 for one exercise."""
    timed, mismatches = speed_checks(exercise), 0
    rows = [(None, set(timed))] + [(a, set(a.fails) & set(timed)) for a in wrong.answers(exercise)
                                   if set(a.fails) & set(timed)]
    for answer, graded in rows:
        student = InProcessStudent(namespace(exercise, answer), exercise)
        results = {name: run(timed[name], student, hidden=True) for name in sorted(graded)}
        failed = {name for name, r in results.items() if r.failed}
        expected = set() if answer is None else graded
        ok = failed == expected
        mismatches += not ok
        for workload in workloads(exercise):
            found = speed._measured.get(student, {}).get(workload.function)
            if found is None:
                continue
            what = (f"{found.fraction:6.1%} of {workload.limit.name} ({found.seconds * 1e3:.3f} ms vs "
                    f"{found.limit_seconds * 1e3:.3f} ms, {found.reps} reps; {found.choice or ''})"
                    if isinstance(found, speed.Measurement) else f"no time ({str(found)[:300]})")
            print(f"{'ok' if ok else 'MISMATCH':8}  {exercise}:{answer.name if answer else 'solution'} "
                  f"{workload.function}: {what}", flush=True)
        print(f"          failed {sorted(failed)}, expected {sorted(expected)}", flush=True)
    return 1 if mismatches else 0


def _checks_of(exercise: str, workload) -> list[str]:
    """The speed checks that time `workload` (their source names it)."""
    import inspect

    names = [n for n, w in vars(sys.modules[checks_for(exercise)[next(iter(speed_checks(exercise)))].function
                                            .__module__]).items() if w is workload]
    return [name for name, c in speed_checks(exercise).items()
            if any(re.search(rf"\b{n}\b", inspect.getsource(c.function)) for n in names)]


def exercises_with_speed_checks() -> list[str]:
    found = []
    for path in sorted((ROOT / "solutions").glob("*/*/checks.py")):
        exercise = f"{path.parent.parent.name}/{path.parent.name}"
        if "_speed(student" in path.read_text():
            found.append(exercise)
    return found


def step_one(exercise: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--right-or-wrong", exercise, "0"])


def finish_step_one(exercise: str, process: subprocess.Popen) -> int:
    code = process.wait()
    while code >= CONTEXT_LOST:
        code = subprocess.run([sys.executable, __file__, "--right-or-wrong", exercise, str(code - CONTEXT_LOST + 1)],
                              check=False).returncode
    return code


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    if len(sys.argv) == 4 and sys.argv[1] == "--right-or-wrong":
        sys.exit(right_or_wrong(sys.argv[2], int(sys.argv[3])))
    if len(sys.argv) == 3 and sys.argv[1] == "--timed":
        sys.exit(timed_rows(sys.argv[2]))
    exercises = sys.argv[1:] or exercises_with_speed_checks()
    started = {e: step_one(e) for e in exercises}
    codes = [finish_step_one(e, p) for e, p in started.items()]
    codes += [subprocess.run([sys.executable, __file__, "--timed", e], check=False).returncode for e in exercises]
    sys.exit(1 if any(codes) else 0)
