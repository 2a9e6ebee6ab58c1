"""The `aisys_grader` a student's kernel sees while grading: checks run in the grader, never here.

The grader copies this file into the sandbox as `aisys_grader/__init__.py`, beside
`bridge.py`, `plain.py` and `reps.py` (the speed checks' timing loop), so a notebook's
`checker(...)` cell still runs and the grader's calls reach student functions through
`aisys_grader.bridge.call`.
"""


def checker(exercise, namespace):
    def check(name, hidden=False):
        print(f"{name}: checked by the grader")

    return check
