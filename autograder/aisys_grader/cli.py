"""The `aisys-grader` command: the instructor's and course author's tools."""

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aisys-grader", description="Exercise notebooks and grading for aisys.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("generate", help="regenerate exercises/ and autograder/source/ from solutions/")
    args = parser.parse_args(argv)

    if args.command == "generate":
        from .generate import ROOT, generate

        for path in generate():
            print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
