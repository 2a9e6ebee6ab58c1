"""nbgrader configuration of the aisys course; run nbgrader from this folder.

Source notebooks in source/ are generated from solutions/ by `aisys-grader generate`
(never edit them here). The course's grading engine reads the same settings.
"""

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import AssignLatePenalties, CheckCellMetadata, LimitOutput

from aisys_grader.autograde import SandboxedExecute, SaveGrades
from aisys_grader.export import CsvExport

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "aisys"
# What replaces a solution region in the student's notebook (STYLE: uniform stubs).
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
# Used by `nbgrader validate` only: grading runs in the engine, with its own time limits (engine.Timeouts).
c.Execute.timeout = 300

# Grade with the sandboxed engine: student code runs in bubblewrap, checks run in the
# grader's process (aisys_grader/autograde.py). nbgrader's other steps are unchanged.
# A notebook whose checks were skipped (GPU-only, graded without a GPU) gets no grade: SaveGrades
# is SaveAutoGrades except that it records nothing for such a notebook.
c.Autograde.autograde_preprocessors = [SandboxedExecute, ClearMetadataPreprocessor, LimitOutput, SaveGrades,
                                       AssignLatePenalties, CheckCellMetadata]

# `nbgrader export` writes grades.csv with the csv module, escaping cells a spreadsheet would run as formulas.
c.ExportApp.plugin_class = CsvExport
