"""The `gradient-doctor` command line: parse arguments, run, report, exit status."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import gradient_doctor
from gradient_doctor.cli.output_paths import check_outputs
from gradient_doctor.errors import UsageError

EXIT_HEALTHY, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2
EXIT_STATUSES = (
    "0 healthy; 1 a problem was diagnosed, or the script crashed; 2 usage error "
    "(or the script's framework is not installed); N the script's own sys.exit(N) with N not 0 (a "
    "message passed to sys.exit gives 1); 128+S the run was stopped by signal S (130 SIGINT, "
    "143 SIGTERM), every requested report still written"
)
INSTALL_TENSORFLOW = 'pip install "gradient-doctor[tensorflow]"'
INSTALL_TORCH = 'pip install "gradient-doctor[torch]"'
# Kept here, not imported from the TensorFlow adapter: `--help` must not load TensorFlow.
DEFAULT_TRIAL_STEPS = 200
DEFAULT_PROGRESS_SECONDS = 30.0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(
        prog="gradient-doctor",
        description="Find out why training goes NaN, and what will fix it.",
        epilog=f"Exit status of `run`: {EXIT_STATUSES}.",
    )
    parser.add_argument(
        "--version", action="version", version=f"gradient-doctor {gradient_doctor.__version__}"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        usage="%(prog)s [-h] [options] SCRIPT [ARGS ...]",
        help="run a training script unchanged, watching every fit and custom loop",
        description="Run SCRIPT as `python SCRIPT ARGS` would, with the doctor watching.",
        epilog=f"Exit status: {EXIT_STATUSES}.",
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
        help="do not stop training at the first problem (bad updates are still skipped; "
        "a failure right after another, or past the 5th diagnosed, is counted, not "
        "diagnosed again)",
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
        "the step itself to the new folder DIR; `gradient-doctor replay DIR` runs it again "
        "(PyTorch: its aten ops and at most 256 MiB of tensors; the manifest lists what is "
        "left out)",
    )
    run.add_argument(
        "--stop-after",
        type=positive_int,
        metavar="N",
        help="stop training after N watched steps; a run that was healthy so far ends "
        "healthy (`gradient-doctor fix` reruns a patched script only as far as it needs)",
    )
    run.add_argument(
        "--sample-every",
        type=positive_int,
        metavar="N",
        help="PyTorch: measure the per-module statistics (dead and saturated units, weight "
        "norms) every N steps throughout (default: every 10, then as a 1%% time budget "
        "allows); the reruns that confirm fixes use 1, so that a patch that kills the "
        "units shows within them",
    )
    run.add_argument(
        "--confirm",
        choices=("auto", "always", "never"),
        default="auto",
        help="after the run, apply each verified fix's patch to a copy of this folder and run "
        "the copy again from the start; a patch that does not hold there is not verified "
        "(auto: when the run took at most two minutes; default auto)",
    )
    # Optional to argparse, required by `parse`: with ARGS after it, argparse would say
    # "the following arguments are required: SCRIPT, ARGS", though ARGS may be empty.
    run.add_argument("script", metavar="SCRIPT", nargs="?", help="the training script to run")
    run.add_argument(
        "script_args", nargs=argparse.REMAINDER, metavar="ARGS", help="your script's own arguments"
    )
    fix = commands.add_parser(
        "fix",
        usage="%(prog)s [-h] [options] SCRIPT [ARGS ...]",
        help="diagnose SCRIPT, rerun a copy with the best verified patch, keep the patch if "
        "it held",
        description="Run SCRIPT under the doctor; when a fix is verified, apply its patch to a "
        "copy of this folder (your files are never changed), run the copy again from the "
        "start, and write the patch to --out only when that run trained healthy past the "
        "step where the original failed. Exit status 0 when a patch held (or there was "
        "nothing to fix), 1 when none held, 2 usage error.",
    )
    fix.add_argument(
        "--out",
        metavar="PATH",
        default="gradient-doctor.patch",
        help="where to write the patch that held (default gradient-doctor.patch)",
    )
    fix.add_argument(
        "--steps-past",
        type=non_negative_int,
        default=200,
        metavar="N",
        help="how many steps past the original failure the patched run must stay healthy "
        "(default 200)",
    )
    fix.add_argument(
        "--trial-steps",
        type=non_negative_int,
        default=DEFAULT_TRIAL_STEPS,
        metavar="N",
        help=f"steps of each fix trial in the diagnosis (default {DEFAULT_TRIAL_STEPS})",
    )
    # Optional to argparse, required by `parse`: with ARGS after it, argparse would say
    # "the following arguments are required: SCRIPT, ARGS", though ARGS may be empty.
    fix.add_argument("script", metavar="SCRIPT", nargs="?", help="the training script to fix")
    fix.add_argument(
        "script_args", nargs=argparse.REMAINDER, metavar="ARGS", help="your script's own arguments"
    )
    replay = commands.add_parser(
        "replay",
        help="run a crash dump's failing step again and diagnose it, without the script",
        description="Replay the step saved by `gradient-doctor run --dump DIR`: no script, "
        "model code or data needed. Exit status 1 when the problem reproduces, 0 when not, "
        "2 when the dump cannot be read (or the framework that wrote it is not installed).",
    )
    replay.add_argument("--report", metavar="PATH", help="write the JSON report to PATH")
    replay.add_argument("dump", metavar="DIR", help="the folder `run --dump DIR` wrote")
    for name, command in (("run", run), ("fix", fix), ("replay", replay)):
        # Which command's usage an argument it does not know is said with (`parse`).
        command.set_defaults(command_parser=command, command_name=name)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The parsed command line; an option a command does not know is said with that
    command's usage, and where its options go (argparse says it with the top-level
    usage, which lists no option of `run`)."""
    options, unknown = parser.parse_known_args(argv)
    if options.command_name in ("run", "fix") and options.script is None:
        options.command_parser.error("the following arguments are required: SCRIPT")
    if unknown:
        where = (
            ""
            if options.command_name == "replay"
            else " (the doctor's options go before SCRIPT; what follows SCRIPT is your "
            "script's own)"
        )
        options.command_parser.error(
            f"unrecognized arguments: {' '.join(unknown)}{where}; see "
            f"`gradient-doctor {options.command_name} --help`"
        )
    return options


def non_negative_int(text: str) -> int:
    """Parse a count given on the command line, with a message that says what is expected."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """Parse a count of at least 1 given on the command line."""
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
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
    if path.endswith(".ipynb"):
        script = path[: -len(".ipynb")] + ".py"
        raise UsageError(
            f"cannot run {path!r}: it is a Jupyter notebook, not a Python script. Export "
            f"it first, `jupyter nbconvert --to script {path}`, remove the shell and magic "
            f"lines (`!pip ...`, `%matplotlib ...`) and run `gradient-doctor run {script}`; "
            "or, inside the notebook, watch the training with one line (the `Doctor()` "
            "Keras callback, `gradient_doctor.watch`, `gradient_doctor.torch.watch`)."
        )
    check_parses(path)


# Lines of a notebook exported as it was: a shell command or an IPython magic.
_NOTEBOOK_LINE = ("!", "%")


def check_parses(path: str) -> None:
    """Raise `UsageError` when the script is not valid Python (nothing of it ran yet, so
    it is no problem of the training's): where, and what to do for a notebook's lines."""
    try:
        with open(path, "rb") as script:
            source = script.read()
    except OSError as error:
        raise UsageError(f"cannot run {path!r}: {error.strerror}.") from None
    try:
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None)
        text = (getattr(error, "text", None) or "").strip()
        where = f" at line {line}" if line else ""
        shown = f": `{text}`" if text else ""
        reason = error.msg if isinstance(error, SyntaxError) else str(error)
        message = f"cannot run {path!r}: it is not valid Python{where}{shown} ({reason})."
        if text.startswith(_NOTEBOOK_LINE):
            message += (
                " That is a notebook's shell or magic line, which runs only in Jupyter: "
                "remove it (install packages before the run) and run the script again."
            )
        else:
            message += " Fix the script so that `python` can run it, then run the doctor."
        raise UsageError(message) from None


def check_framework(framework: str) -> None:
    """Raise `UsageError` when `framework` ("tensorflow" or "torch") is not installed here."""
    if importlib.util.find_spec(framework) is None:
        name = "PyTorch" if framework == "torch" else "TensorFlow"
        extra = INSTALL_TORCH if framework == "torch" else INSTALL_TENSORFLOW
        raise UsageError(
            f"{name} is not installed in this environment ({sys.executable}). Install "
            f"it with `{extra}`, or run the doctor from the environment your "
            "training script runs in."
        )


def check_keras_backend(script: str) -> None:
    """Say what is watched of a script that runs Keras on another backend than
    TensorFlow's: on torch's, the script runs on it unchanged but Keras's own optimizers
    are not watched (a torch.optim step is); any other backend is a `UsageError`."""
    from gradient_doctor.cli.framework_choice import TENSORFLOW, TORCH, keras_backend, uses_keras

    if not uses_keras(script):
        return
    backend = keras_backend(script)
    if backend == TORCH:
        print(
            "gradient-doctor: this script runs Keras on its torch backend (KERAS_BACKEND): it "
            "runs on it unchanged, but the updates of Keras's own optimizers are not watched "
            "there (only torch.optim steps are); for the full diagnosis run it on "
            "KERAS_BACKEND=tensorflow.",
            file=sys.stderr,
            flush=True,
        )
    elif backend != TENSORFLOW:
        raise UsageError(
            f"this script runs Keras on its {backend!r} backend (KERAS_BACKEND), which the "
            "doctor does not watch: it watches Keras on TensorFlow, and PyTorch. Set "
            'KERAS_BACKEND to "tensorflow" (in the script or the environment) to diagnose it.'
        )


def check_dump_support(framework: str) -> None:
    """Raise `UsageError` when a dump of `framework` cannot be written or read here: a
    PyTorch dump's tensors are safetensors files, and safetensors is not installed."""
    if framework == "torch" and importlib.util.find_spec("safetensors") is None:
        raise UsageError(
            "a PyTorch crash dump holds its tensors as safetensors files, and safetensors is "
            f"not installed in this environment ({sys.executable}). Install it with "
            f"`{INSTALL_TORCH}` (or `pip install safetensors`), or run without --dump."
        )


def run_command(options: argparse.Namespace) -> int:
    """Run the script under the doctor and report; returns the exit status."""
    check_script(options.script)
    check_outputs(options.script, options.report, options.html, options.tensorboard)
    options = _outputs_made_absolute(options)
    from gradient_doctor.cli.framework_choice import script_framework

    framework = script_framework(options.script)
    check_framework(framework)
    check_keras_backend(options.script)
    if options.dump:
        from gradient_doctor.core.dump_folder import check_new_dump_directory

        check_dump_support(framework)
        check_new_dump_directory(options.dump)
    # TensorFlow's start-up INFO lines would bury the diagnosis; warnings still show.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from gradient_doctor.cli.patched_rerun import relative_script
    from gradient_doctor.cli.watched_run import watched_run

    if relative_script(options.script) is None:
        print(
            f"gradient-doctor: {options.script} lies outside the folder you run from, so "
            "its fixes come without patches (a patch's paths are relative to that folder) "
            "and none is confirmed by a rerun; run from a folder that holds the script, "
            f"for example `cd {os.path.dirname(os.path.abspath(options.script))}`.",
            file=sys.stderr,
            flush=True,
        )

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
        max_steps=options.stop_after,
        sample_every=options.sample_every,
        confirm=options.confirm,
        framework=framework,
    )


# The options naming files or folders the doctor writes.
_OUTPUT_OPTIONS = ("report", "html", "tensorboard", "dump", "out")


def _outputs_made_absolute(options: argparse.Namespace) -> argparse.Namespace:
    """`options` with each output path made absolute against the folder run from (once
    they are checked, so messages name them as typed), so that a script that changes
    its working directory (`os.chdir`) moves none of them: before, `--report
    report.json` was written where the script had moved to, over a file there the
    checks had never seen."""
    for name in _OUTPUT_OPTIONS:
        path = getattr(options, name, None)
        if isinstance(path, str) and path:
            setattr(options, name, os.path.abspath(path))
    return options


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gradient-doctor` command."""
    options = parse(build_parser(), argv)
    try:
        if options.command == "fix":
            check_script(options.script)
            from gradient_doctor.cli.framework_choice import script_framework

            check_framework(script_framework(options.script))
            from gradient_doctor.cli.fix_command import fix_command

            return fix_command(
                options.script,
                options.script_args,
                options.out,
                steps_past=options.steps_past,
                trial_steps=options.trial_steps,
            )
        if options.command == "replay":
            check_outputs(None, options.report)
            from gradient_doctor.cli.replay_command import replay_command

            return replay_command(options.dump, options.report)
        return run_command(options)
    except UsageError as error:
        print(f"gradient-doctor: error: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
