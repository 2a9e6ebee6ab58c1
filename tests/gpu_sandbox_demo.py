"""One sandboxed grading run on a GPU machine, for the record: student code that runs CUDA kernels
(torch.sort on the GPU) inside bubblewrap with the GPU passed through, graded by trusted checks,
timed from the grader's side with GPU work synchronised; then a fork bomb and a setsid daemon,
after which nothing of the submission may be left running.

    python tests/gpu_sandbox_demo.py      # needs bubblewrap (or AISYS_BWRAP), torch with CUDA
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import nbformat

import conftest  # noqa: F401  (registers the grader's test exercises)
from aisys_grader.engine import Timeouts, grade_notebook
from aisys_grader.sandbox import Sandbox
from processes import leftovers

SETUP = ("import numpy as np\nimport torch\nfrom aisys_grader import checker\n"
         "check = checker('99-grader/timing', globals())")
ANSWER = ("def sort_values(x):\n"
          "    return torch.sort(torch.from_numpy(x).cuda()).values.cpu().numpy()\n")
PROBE = ("import os\nprint('GPU in the sandbox:', torch.cuda.get_device_name(0))\n"
         f"print('repository visible:', os.path.exists({str(Path(__file__).resolve().parents[1] / 'solutions')!r}))\n"
         "print('network:', end=' ')\nimport socket\n"
         "try: socket.create_connection(('1.1.1.1', 53), timeout=2); print('reachable')\n"
         "except OSError as e: print('unreachable:', e)")


BOMB = ("import os, subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', 'aisys-demo-marker'],"
        " start_new_session=True)\n"
        "while True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)")


def cell(source, **nbgrader):
    metadata = {"nbgrader": {"schema_version": 3, **nbgrader}} if nbgrader else {}
    return nbformat.v4.new_code_cell(source, metadata=metadata)


def notebook(answer):
    return nbformat.v4.new_notebook(cells=[
        cell(SETUP, grade_id="setup", locked=True, grade=False, solution=False),
        cell(answer, grade_id="answer", solution=True, grade=False, locked=False),
        cell(PROBE),
        cell('check("sorted_correctly")', grade_id="sorted_correctly", grade=True, points=1, solution=False,
             locked=True),
        cell('check("sorts_fast")', grade_id="sorts_fast", grade=True, points=1, solution=False, locked=True),
        cell(BOMB),
    ])


if __name__ == "__main__":
    sandbox = Sandbox.create()
    grade = grade_notebook("99-grader/timing", notebook("raise NotImplementedError()"), notebook(ANSWER),
                           seed=20261121, sandbox=sandbox, timeouts=Timeouts(cell=10, call=30, notebook=300))
    probe = next(c for c in grade.notebook.cells if c.source == PROBE)
    print("".join(o.get("text", "") for o in probe.outputs) or probe.outputs)
    bomb = next(c for c in grade.notebook.cells if c.source == BOMB)
    print("fork bomb cell:", [o.get("evalue", o.get("text", "")) for o in bomb.outputs])
    print("processes of the submission alive after grading:", leftovers("aisys-demo-marker", "aisys-grade-"))
    print(json.dumps({"score": grade.score, "max_score": grade.max_score, "seconds": round(grade.seconds, 2),
                      "checks": {n: c.message or "passed" for n, c in grade.checks.items()},
                      "notes": grade.notes, "sandbox": grade.enforced}, indent=1))
