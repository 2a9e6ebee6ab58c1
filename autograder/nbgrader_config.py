"""nbgrader configuration of the aisys course; run nbgrader from this folder.

Source notebooks in source/ are generated from solutions/ by `aisys-grader generate`
(never edit them here). The course's grading engine reads the same settings.
"""

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "aisys"
# What replaces a solution region in the student's notebook (STYLE: uniform stubs).
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
# A notebook whose cells run longer than this is stopped; its remaining checks score 0.
c.Execute.timeout = 300
