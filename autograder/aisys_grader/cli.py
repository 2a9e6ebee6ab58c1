"""The `aisys-grader` command: the instructor's and course author's tools."""

import argparse
import sys
from collections import Counter
from pathlib import Path

MAX_STATUS = 125  # exit statuses from 126 up mean "cannot run", "not found" and killed by a signal to a shell
WRITTEN = {"grades": "grades", "feedback": "feedback pages", "autograded": "autograded notebooks"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aisys-grader", description="Exercise notebooks and grading for aisys.")
    commands = parser.add_subparsers(dest="command", required=True)
    generate_parser = commands.add_parser("generate",
                                          help="regenerate exercises/ and autograder/source/ from solutions/")
    generate_parser.add_argument("exercises", nargs="*", help="only these, as <chapter>/<name> (default: all)")
    new_parser = commands.add_parser(
        "new", help="start a new exercise: solutions/<chapter>/<name>/ from a template, listed in the book",
        description="Create solutions/<chapter>/<name>/ (notebook.py, checks.py, wrong_answers.toml, spec.toml) "
                    "from a template that passes its own tests, and list it in book/_toc.yml under its chapter. "
                    "Then write the reference in src/aisys/, the book page, and run `make exercises`.")
    new_parser.add_argument("exercise", help="<NN-chapter>/<name>, e.g. 08-quantization/int8_matmul")
    new_parser.add_argument("--title", required=True, help='the notebook\'s heading, "Exercise: <title>"')
    grade = commands.add_parser(
        "grade", help="grade a folder or zip of submissions (sandboxed, in parallel)",
        description="Grade a folder or zip of submissions (sandboxed, in parallel) into the gradebook, grades.csv "
                    "and feedback. Exit status: 0 when every student found was graded; otherwise the number of "
                    f"students not graded (at most {MAX_STATUS}), each listed with the reason; 2 with a message "
                    "when the run could not start (bad arguments, no sandbox, an input that cannot be used).")
    grade.add_argument("submissions", type=Path, help="a folder or zip: <student>/<assignment>/<notebook>.ipynb "
                                                      "(nbgrader's layout) or one <student>.ipynb per student")
    grade.add_argument("--layout", choices=["auto", "nbgrader", "flat"], default="auto",
                       help="how submissions are laid out (default auto: the layout that accounts for more "
                            "students; a tie is refused)")
    grade.add_argument("--assignment", required=True, help="e.g. 01-architecture")
    grade.add_argument("--course", type=Path, default=None, help="the nbgrader course folder (default: autograder/)")
    grade.add_argument("--workers", type=int, default=2, help="notebooks graded at once (default 2)")
    grade.add_argument("--force", action="store_true", help="grade again even what has not changed")
    grade.add_argument("--seed", type=int, default=None,
                       help="the assignment's secret seed (default: drawn once and kept in the gradebook)")
    grade.add_argument("--csv", type=Path, default=None,
                       help="where to write the grades (default: <course>/grades.csv)")
    grade.add_argument("--unsandboxed", action="store_true",
                       help="grade without bubblewrap: submissions can then read the checks and fake their grades")
    drills = commands.add_parser(
        "drills", help="hand out a set of interview drills as an nbgrader assignment of its own",
        description="Put the source notebooks of these drills into <course>/source/<assignment>/, to release with "
                    "`nbgrader generate_assignment <assignment>` and grade like any assignment: each notebook is "
                    "graded by its drill's checks, whatever the assignment is called.")
    drills.add_argument("assignment", help="the new assignment's name, e.g. drills-week-3")
    drills.add_argument("drills", nargs="+", help="drill ids, as `aisys drill list --kind code` shows them")
    drills.add_argument("--course", type=Path, default=None, help="the nbgrader course folder (default: autograder/)")
    commands.add_parser("sandbox", help="say whether bubblewrap can sandbox grading on this machine (exit status 1 "
                                        "if it cannot); `aisys doctor` asks this")
    args = parser.parse_args(argv)

    if args.command == "generate":
        from .generate import generate, repository

        try:
            written = generate(only=args.exercises or None)
        except ValueError as error:
            parser.exit(2, f"aisys-grader: error: {error}\n")
        for path in written:
            print(path.relative_to(repository()))
    elif args.command == "new":
        from .generate import repository
        from .scaffold import new

        toc = repository() / "book" / "_toc.yml"
        if not toc.exists():
            print(f"no {toc}: the exercise is not listed in a book")
        try:
            written = new(args.exercise, args.title, toc=toc if toc.exists() else None)
        except ValueError as error:
            parser.exit(2, f"aisys-grader: error: {error}\n")
        for path in written:
            print(f"wrote {path.relative_to(repository())}")
        print("next: the reference in src/aisys/ (named in spec.toml), the book page (spec.toml's page), "
              "then `make exercises` and `make test`")
    elif args.command == "grade":
        from .autograde import needs_gpu_message
        from .course import grade as grade_class
        from .generate import repository
        from .sandbox import SandboxUnavailable

        try:
            rows = grade_class(args.submissions, args.course or repository() / "autograder", args.assignment,
                               workers=args.workers, force=args.force, allow_unsandboxed=args.unsandboxed,
                               seed=args.seed, csv_path=args.csv, layout=args.layout)
        except (SandboxUnavailable, ValueError) as error:
            parser.exit(2, f"aisys-grader: error: {error}\n")
        if hasattr(rows, "layout"):
            where = f" in {rows.root}/" if rows.root else ""
            print(f"layout: {rows.layout}{where}, {len(rows)} student{'s' * (len(rows) != 1)}")
            for refusal in rows.refused:
                whose = f" [{refusal.student}]" if refusal.student else ""
                print(f"not used{whose}: {refusal.path}: {refusal.reason}")
        width = max([len(r["student"]) for r in rows] + [7])
        print(f"{'student':<{width}}  score")
        for row in rows:
            score = f"not graded: {row['not_graded']}" if row.get("not_graded") else \
                f"{row['score']:g}/{row['max_score']:g}"
            print(f"{row['student']:<{width}}  {score}  {row['notes']}".rstrip())
        for exercise in sorted({e for row in rows for e in row["needs_gpu"]}):
            count = sum(exercise in row["needs_gpu"] for row in rows)
            print(f"{needs_gpu_message(exercise)} ({count} submission{'s' * (count != 1)} not graded, "
                  "nothing recorded for them)")
        if getattr(rows, "unchanged", 0):
            print(f"{rows.unchanged} notebook{'s' * (rows.unchanged != 1)} unchanged, not regraded "
                  "(--force grades them again)")
        bases = Counter(row["submitted_from"] for row in rows if row.get("submitted_from"))
        if bases:
            print("submission times (grades.csv's timestamp): "
                  + "; ".join(f"{count} from {basis}" for basis, count in sorted(bases.items())))
        for what, path in getattr(rows, "written", {}).items():
            print(f"{WRITTEN[what]}: {path}")
        if args.unsandboxed:
            print("WARNING: graded without a sandbox; these grades can be faked.")
        not_graded = sum(bool(row.get("not_graded")) for row in rows)
        if not_graded:
            print(f"{not_graded} student{'s' * (not_graded != 1)} not graded (listed above); "
                  "the others are in the gradebook, grades.csv and feedback")
        return min(not_graded, MAX_STATUS)
    elif args.command == "drills":
        from .generate import repository
        from .scaffold import drill_set

        course = args.course or repository() / "autograder"
        try:
            written = drill_set(course, args.assignment, args.drills)
        except ValueError as error:
            parser.exit(2, f"aisys-grader: error: {error}\n")
        for path in written:
            print(f"wrote {path}")
        print(f"next: cd {course} && nbgrader generate_assignment {args.assignment}")
    elif args.command == "sandbox":
        from .sandbox import Sandbox

        sandbox = Sandbox()
        problem = sandbox.problem()
        print(problem or f"{sandbox.bwrap} works")
        return 1 if problem else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
