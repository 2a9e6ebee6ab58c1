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


DRILL_SET = ["iou"]  # an instructor's set of interview drills, handed out as an assignment of its own
# Every chapter's assignment, but the drills': they are graded in sets like DRILL_SET (all of them would take minutes
# here, and tests/test_exercises.py grades each one already).
CHAPTERS = sorted({e.split("/")[0] for e in EXERCISES} - {"09-drills"})


@pytest.mark.slow
@pytest.mark.parametrize("chapter", [*CHAPTERS, "drills-week-1"])
def test_solution_scores_full_marks_and_blank_scores_zero(tmp_path, chapter):
    course = tmp_path / "course"
    if chapter in CHAPTERS:
        shutil.copytree(ROOT / "autograder" / "source" / chapter, course / "source" / chapter)
        exercises = [e for e in EXERCISES if e.startswith(chapter + "/")]
    else:
        done = subprocess.run([str(Path(sys.executable).parent / "aisys-grader"), "drills", chapter, *DRILL_SET,
                               "--course", str(course)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        exercises = [f"09-drills/{drill}" for drill in DRILL_SET]
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", course)
    nbgrader(course, "generate_assignment", chapter, "--force")

    for student, notebook in (("solver", source_notebook), ("blank", student_notebook)):
        for exercise in exercises:
            target = course / "submitted" / student / chapter / f"{exercise.split('/')[1]}.ipynb"
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
