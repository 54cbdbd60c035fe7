"""The `gradient-doctor` command line: parse arguments, run, report, exit status."""

from __future__ import annotations

import argparse
import os
import sys

from gradient_doctor.errors import UsageError

EXIT_HEALTHY, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2
# Kept here, not imported from the TensorFlow adapter: `--help` must not load TensorFlow.
DEFAULT_TRIAL_STEPS = 200
DEFAULT_PROGRESS_SECONDS = 30.0


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
        "--html",
        metavar="PATH",
        help="write an HTML report to PATH: one self-contained file with plots, opens offline",
    )
    run.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="write the watched series as TensorBoard scalars, and the findings as text, "
        "to DIR (at the end of the run)",
    )
    run.add_argument(
        "--progress",
        type=non_negative_float,
        default=DEFAULT_PROGRESS_SECONDS,
        metavar="SECONDS",
        help="print a progress line (step, loss, the risky op closest to its limit) on "
        f"stderr at most every SECONDS (default {DEFAULT_PROGRESS_SECONDS:g}; 0 turns it off)",
    )
    run.add_argument(
        "--keep-going",
        action="store_true",
        help="do not stop training at the first problem (bad updates are still skipped)",
    )
    run.add_argument(
        "--trial-steps",
        type=non_negative_int,
        default=DEFAULT_TRIAL_STEPS,
        metavar="N",
        help="after a non-finite step, try each proposed fix from the last good state "
        f"for N steps (default {DEFAULT_TRIAL_STEPS}; 0 turns the trials off)",
    )
    run.add_argument(
        "--cheap",
        action="store_true",
        help="watch only the global checks (loss, gradient norm, risky ops); no per-layer "
        "statistics, dead or saturated units",
    )
    run.add_argument(
        "--dump",
        metavar="DIR",
        help="at the first non-finite step, save the last good state, the failing batch and "
        "the step itself to the new folder DIR; `gradient-doctor replay DIR` runs it again",
    )
    run.add_argument("script", metavar="SCRIPT", help="the training script to run")
    run.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS")
    replay = commands.add_parser(
        "replay",
        help="run a crash dump's failing step again and diagnose it, without the script",
        description="Replay the step saved by `gradient-doctor run --dump DIR`: no script, "
        "model code or data needed. Exit status 1 when the problem reproduces, 0 when not.",
    )
    replay.add_argument("--report", metavar="PATH", help="write the JSON report to PATH")
    replay.add_argument("dump", metavar="DIR", help="the folder `run --dump DIR` wrote")
    return parser


def non_negative_int(text: str) -> int:
    """Parse a count given on the command line, with a message that says what is expected."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """Parse a number of seconds given on the command line (0 or more)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def check_outputs(options: argparse.Namespace) -> None:
    """Raise `UsageError` before the run when an output path cannot be what it names."""
    for flag, path in (("--report", options.report), ("--html", options.html)):
        if path and os.path.isdir(path):
            raise UsageError(
                f"`{flag}` must name a file, but {path!r} is a folder. "
                f"Pass a file path, for example `{flag} {os.path.join(path, 'report')}`."
            )
    if options.tensorboard and os.path.exists(options.tensorboard):
        if not os.path.isdir(options.tensorboard):
            raise UsageError(
                f"`--tensorboard` must name a folder, but {options.tensorboard!r} is a file. "
                "Pass a folder for the event files, for example `--tensorboard logs/doctor`."
            )


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
    check_outputs(options)
    if options.dump:
        from gradient_doctor.tf_adapter.dump_format import check_new_dump_directory

        check_new_dump_directory(options.dump)
    # TensorFlow's start-up INFO lines would bury the diagnosis; warnings still show.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from gradient_doctor.cli.watched_run import watched_run

    return watched_run(
        options.script,
        options.script_args,
        options.report,
        options.keep_going,
        trial_steps=options.trial_steps,
        layer_stats=not options.cheap,
        html_path=options.html,
        tensorboard_dir=options.tensorboard,
        progress_seconds=options.progress,
        dump_dir=options.dump,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gradient-doctor` command."""
    parser = build_parser()
    options = parser.parse_args(argv)
    try:
        if options.command == "replay":
            from gradient_doctor.cli.replay_command import replay_command

            return replay_command(options.dump, options.report)
        return run_command(options)
    except UsageError as error:
        print(f"gradient-doctor: error: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
