"""The `gradient-doctor` command line: parse arguments, run, report, exit status."""

from __future__ import annotations

import argparse
import os
import sys

from gradient_doctor.errors import UsageError

EXIT_HEALTHY, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(
        prog="gradient-doctor",
        description="Find out why training goes NaN, and what will fix it.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="run a training script unchanged, watching every fit and custom loop",
        description="Run SCRIPT as `python SCRIPT ARGS` would, with the doctor watching.",
    )
    run.add_argument("--report", metavar="PATH", help="write the JSON report to PATH")
    run.add_argument(
        "--keep-going",
        action="store_true",
        help="do not stop training at the first problem (bad updates are still skipped)",
    )
    run.add_argument("script", metavar="SCRIPT", help="the training script to run")
    run.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS")
    return parser


def check_script(path: str) -> None:
    """Raise `UsageError` unless `path` is a readable Python file."""
    if not os.path.exists(path):
        raise UsageError(
            f"cannot run {path!r}: no such file. Pass the path of a Python training "
            "script, for example `gradient-doctor run train.py --epochs 3`."
        )
    if os.path.isdir(path):
        raise UsageError(
            f"cannot run {path!r}: it is a folder. Pass the training script inside it, "
            f"for example `gradient-doctor run {os.path.join(path, 'train.py')}`."
        )


def run_command(options: argparse.Namespace) -> int:
    """Run the script under the doctor and report; returns the exit status."""
    check_script(options.script)
    # TensorFlow's start-up INFO lines would bury the diagnosis; warnings still show.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from gradient_doctor.cli.watched_run import watched_run

    return watched_run(options.script, options.script_args, options.report, options.keep_going)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gradient-doctor` command."""
    parser = build_parser()
    options = parser.parse_args(argv)
    try:
        return run_command(options)
    except UsageError as error:
        print(f"gradient-doctor: error: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
