"""The course's exercises as a package: `aisys_exercises.<chapter>.<name>.checks` is an exercise's checks.py.

Its path is the folder of exercise folders (see aisys_grader.exercise): $AISYS_EXERCISES when set, so that
an installed grader grades a course kept anywhere, else the checkout's solutions/. Tests append folders of
exercises of their own to `__path__`.
"""

import os
from pathlib import Path

ENV = "AISYS_EXERCISES"


def _course() -> Path:
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).resolve()
    return Path(__file__).resolve().parents[2] / "solutions"


__path__ = [str(_course())]
