"""nbgrader's own workflow on a temporary course: generate, submit two students, autograde, export."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from aisys_grader import records
from notebooks import EXERCISES, ROOT, source_notebook, student_notebook

NBGRADER = [sys.executable, "-m", "nbgrader"]


def nbgrader(course: Path, *args: str) -> None:
    # nbgrader runs `alembic` from PATH, as it finds it in an activated environment.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "AISYS_GRADING_SEED": "20261121"}
    done = subprocess.run([*NBGRADER, *args], cwd=course, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"


@pytest.mark.slow
@pytest.mark.parametrize("chapter", sorted({e.split("/")[0] for e in EXERCISES}))
def test_solution_scores_full_marks_and_blank_scores_zero(tmp_path, chapter):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "autograder" / "source" / chapter, course / "source" / chapter)
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", course)
    nbgrader(course, "generate_assignment", chapter, "--force")

    exercises = [e for e in EXERCISES if e.startswith(chapter + "/")]
    for student, notebook in (("solver", source_notebook), ("blank", student_notebook)):
        for exercise in exercises:
            target = course / "submitted" / student / f"{exercise}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(notebook(exercise), target)
    nbgrader(course, "autograde", chapter, "--create")
    nbgrader(course, "export", "--to", "grades.csv")

    rows = {row["student_id"]: row for row in csv.DictReader((course / "grades.csv").open())}
    assert set(rows) == {"solver", "blank"}
    max_score = float(rows["solver"]["max_score"])
    assert max_score > 0
    # A notebook whose checks were skipped (GPU-only, graded without a GPU) has no grade: nothing, not even 0.
    ungraded = {p.name.removesuffix(".skipped.json")
                for p in (course / "aisys_results" / chapter / "solver").glob("*.skipped.json")}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        assert {g.auto_score for s in ("solver", "blank") for nb in ungraded
                for g in gradebook.find_submission_notebook(nb, chapter, s).grades} <= {None}
        ungraded_points = sum(gradebook.find_notebook(nb, chapter).max_score for nb in ungraded)
        # Optional checks (speed checks) skipped without a GPU: the notebook is graded, those cells get no score.
        left_out = [(p.stem, c) for p in (course / "aisys_results" / chapter / "solver").glob("*.json")
                    if not p.name.endswith(".skipped.json") for c in json.loads(p.read_text())["checks"]
                    if c.get("optional")]
        assert {gradebook.find_grade(c["name"], nb, chapter, "solver").auto_score for nb, c in left_out} <= {None}
        ungraded_points += sum(c["points"] for _, c in left_out)
    assert float(rows["solver"]["score"]) == max_score - ungraded_points
    assert float(rows["blank"]["score"]) == 0
    # The scores came from the sandboxed engine, not from nbgrader's own Execute.
    gradebook = f"sqlite:///{course / 'gradebook.db'}"
    runs = {r.student: r for r in (records.recorded_run(gradebook, chapter, s, e.split("/")[1])
                                   for s in ("solver", "blank") for e in exercises) if r is not None}
    assert set(runs) == {"solver", "blank"}
    assert "bubblewrap" in json.loads(runs["solver"].report)["enforced"]["sandbox"]
