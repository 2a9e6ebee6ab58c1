"""The `aisys` command."""

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aisys", description="AI systems course: reference code and tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("doctor", help="print what this machine has and which exercise tracks can run here")
    commands.add_parser("drill", add_help=False, help="interview drills: `aisys drill --help`")
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["drill"]:  # its own parser (aisys.drill.cli), shared with the %drill magic
        from .drill.cli import main as drill

        return drill(argv[1:])
    args = parser.parse_args(argv)

    try:
        if args.command == "doctor":
            from .doctor import report

            print(report())
    except (ValueError, RuntimeError) as error:  # bad settings: say what is wrong, no traceback
        parser.exit(2, f"aisys: error: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
