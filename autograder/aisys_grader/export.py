"""grades.csv as nbgrader writes it, but safe to open in a spreadsheet: nbgrader's export plugin for the course.

nbgrader's CsvExportPlugin joins fields with commas and no quoting, so a student id holding a
comma shifts the columns, and one that begins with `=` (`=HYPERLINK(...)`) is a formula when
the file is opened in a spreadsheet. This plugin writes the same columns and rows with Python's
`csv` module, and escapes every text cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage
return by a leading `'`, as OWASP recommends against CSV injection. Numbers are written as numbers.
nbgrader_config.py makes it the plugin of `nbgrader export`; `aisys-grader grade` uses it too.
"""

import csv

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import ExportPlugin

COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "raw_score",
           "late_submission_penalty", "score", "max_score"]
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell(value) -> str | float:
    """A CSV cell: numbers as they are, None as empty, text escaped when a spreadsheet would take it for a formula."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    value = "" if value is None else str(value)
    return "'" + value if value.startswith(FORMULA_START) else value


class CsvExport(ExportPlugin):
    """nbgrader's CSV export (same columns, a student without a submission scores 0), quoted and escaped."""

    def export(self, gradebook: Gradebook) -> None:
        students, assignments = {str(s) for s in self.student}, {str(a) for a in self.assignment}
        with open(self.to or "grades.csv", "w", newline="", encoding="utf-8") as file:
            writer = csv.writer(file)
            writer.writerow(COLUMNS)
            for assignment in gradebook.assignments:
                if assignments and assignment.name not in assignments:
                    continue
                for student in gradebook.students:
                    if students and student.id not in students:
                        continue
                    writer.writerow([cell(v) for v in self._row(gradebook, assignment, student)])

    @staticmethod
    def _row(gradebook: Gradebook, assignment, student) -> list:
        try:
            submission = gradebook.find_submission(assignment.name, student.id)
        except MissingEntry:  # nothing submitted (or nothing graded): nbgrader's convention is a score of 0
            timestamp, raw, penalty, score = None, 0.0, 0.0, 0.0
        else:
            timestamp, raw, penalty = submission.timestamp, submission.score, submission.late_submission_penalty
            score = max(0.0, raw - penalty)
        return [assignment.name, assignment.duedate, timestamp, student.id, student.last_name, student.first_name,
                student.email, raw, penalty, score, assignment.max_score]
