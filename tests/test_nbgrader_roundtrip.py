"""nbgrader's own workflow on a temporary course: generate, submit two students, autograde, export."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
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
CHAPTERS = sorted({e.split("/")[0] for e in EXERCISES} - {"09-drills"})
# Each chapter's assignment goes through nbgrader's whole workflow with the notebooks that exercise every path of it,
# not all of them (tests/test_exercises.py grades every exercise through the engine; test_every_notebook_releases
# below sends every notebook through generate_assignment): grading all took minutes per chapter on CI.
ROUND_TRIP = {
    "01-architecture": ["roofline"],
    "02-gpu-programming": ["cuda_c",  # GPU-only: skipped without a GPU, so ungraded rather than 0
                           "reduction",  # the SIMT simulator in the sandbox
                           "triton_softmax"],  # Triton's interpreter, and an optional speed check left out on a CPU
    "03-tensor-cores": ["gemm_tiling"],
    "04-autograd": ["fusion"],  # a student's generated Triton source run in the sandbox's clean room
    "05-parallel-training": ["pipeline_schedules"],  # a trusted harness driving the student's functions on ranks
    "06-collectives": ["tree_allreduce"],  # ranks as processes in the sandbox's clean room
    "07-inference": ["kv_cache"],
    "08-quantization": ["affine_quantization"],
}

GPU_ONLY = {"02-gpu-programming": {"cuda_c"}}  # of ROUND_TRIP's notebooks, those no check of runs without a GPU


def test_every_chapter_has_a_round_trip():
    assert sorted(ROUND_TRIP) == CHAPTERS, "add a chapter's representative notebooks to ROUND_TRIP"
    missing = [f"{c}/{n}" for c, names in ROUND_TRIP.items() for n in names if f"{c}/{n}" not in EXERCISES]
    assert not missing, f"not exercises: {missing}"


@pytest.mark.slow
def test_every_notebook_releases(tmp_path):
    """nbgrader's generate_assignment takes every chapter's every notebook, and what it releases to students is
    the student notebook the repository ships, cell by cell."""
    course = tmp_path / "course"
    shutil.copytree(ROOT / "autograder" / "source", course / "source")
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", course)
    for chapter in CHAPTERS:
        nbgrader(course, "generate_assignment", chapter, "--force")
    for exercise in (e for e in EXERCISES if e.split("/")[0] in CHAPTERS):
        released = nbformat.read(course / "release" / f"{exercise}.ipynb", as_version=4)
        shipped = nbformat.read(student_notebook(exercise), as_version=4)
        assert [c.source for c in released.cells] == [c.source for c in shipped.cells], exercise


@pytest.mark.slow
@pytest.mark.parametrize("chapter", [*CHAPTERS, "drills-week-1"])
def test_solution_scores_full_marks_and_blank_scores_zero(tmp_path, chapter):
    course = tmp_path / "course"
    if chapter in CHAPTERS:
        exercises = [f"{chapter}/{name}" for name in ROUND_TRIP[chapter]]
        for exercise in exercises:
            target = course / "source" / f"{exercise}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source_notebook(exercise), target)
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
    if not torch.cuda.is_available():
        assert ungraded == GPU_ONLY.get(chapter, set())
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
