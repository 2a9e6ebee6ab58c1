"""Grade a chapter's solution notebooks through the sandboxed engine, for the record (e.g. on a GPU machine,
where the student kernels' launches go to numba-cuda inside bubblewrap and profiled checks to the simulator).

    python tests/gpu_grading_demo.py 02-gpu-programming [name]    # needs bubblewrap (or AISYS_BWRAP)
"""

import sys
from pathlib import Path

import nbformat

from aisys_grader.engine import Timeouts, grade_notebook
from aisys_grader.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]


def main(chapter: str, name: str = "*") -> int:
    sandbox = Sandbox.create()
    failed = 0
    for source in sorted((ROOT / "autograder" / "source" / chapter).glob(f"{name}.ipynb")):
        exercise = f"{chapter}/{source.stem}"
        handout = nbformat.read(ROOT / "exercises" / chapter / source.name, as_version=4)
        grade = grade_notebook(exercise, handout, nbformat.read(source, as_version=4), seed=20261121,
                               sandbox=sandbox, timeouts=Timeouts(cell=300, call=120, notebook=900))
        failed += grade.score < grade.max_score
        print(f"{exercise}: {grade.score:g} / {grade.max_score:g} in {grade.seconds:.1f} s "
              f"(GPU in the sandbox: {grade.enforced.get('gpu')}; memory: {grade.enforced.get('memory')})")
        for name, outcome in grade.checks.items():
            if not outcome.passed:
                print(f"    {name}: {outcome.message[:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
