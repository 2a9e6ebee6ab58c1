"""The speed checks of an exercise graded through the sandboxed engine on a GPU machine, for the record: the
student's kernel runs in bubblewrap and the grader times it across the bridge (aisys_grader/speed.py).

    python tests/gpu_speed_sandbox_demo.py 02-gpu-programming/triton_softmax ...   # bubblewrap (or AISYS_BWRAP)

The solution notebook is graded with only its speed checks' cells (the other checks score "not graded"), and the
cells that time things themselves left out; each measurement is printed as the grader found it.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import nbformat

from aisys_grader import speed
from aisys_grader.engine import Timeouts, grade_notebook
from aisys_grader.sandbox import Sandbox
from speed_table import ROOT, TIMES_ITSELF


def only_speed(notebook):
    def kept(cell):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        graded = cell.get("metadata", {}).get("nbgrader", {}).get("grade")
        return (not graded or grade_id.endswith("_speed")) and not TIMES_ITSELF.search(cell.source)

    notebook.cells = [c for c in notebook.cells if kept(c)]
    return notebook


def main(exercise: str) -> int:
    measure = speed.measure

    def measure_and_say(student, workload):
        found = measure(student, workload)
        print(f"{type(student).__name__}: {speed.describe(workload, found)}", flush=True)
        return found

    speed.measure = measure_and_say
    handout, solution = (nbformat.read(ROOT / folder / f"{exercise}.ipynb", as_version=4)
                         for folder in ("exercises", "autograder/source"))
    grade = grade_notebook(exercise, only_speed(handout), only_speed(solution), seed=20261121, sandbox=Sandbox.create(),
                           timeouts=Timeouts(cell=300, call=120, notebook=900))
    print(f"{exercise}: GPU in the sandbox: {grade.enforced.get('gpu')}; {grade.seconds:.1f} s")
    failed = 0
    for name, outcome in grade.checks.items():
        if name.endswith("_speed"):
            failed += not outcome.passed
            print(f"    {name}: {'passed' if outcome.passed else outcome.message[:400]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(1 if any([main(exercise) for exercise in sys.argv[1:]]) else 0)
