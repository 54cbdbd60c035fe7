"""Run a Python script as `python SCRIPT ARGS` would: same argv, `__main__`, import path."""

from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from gradient_doctor.cli.interrupts import Terminated, signal_name
from gradient_doctor.core.source_frames import (
    display_path,
    is_doctor_file,
    is_user_file,
    paths_relative_to,
)
from gradient_doctor.errors import TrainingStopped


@dataclass(frozen=True)
class ScriptOutcome:
    """How the script ended.

    Attributes:
        stopped: the doctor stopped training (a problem was diagnosed).
        error: the script's own exception, as "Type: message" ("SystemExit: 3" for
            a `sys.exit` that was not 0).
        exit_code: the status the script asked for with `sys.exit` (1 for a message,
            as Python gives), or None when it did not call it.
        interrupted: the number of the signal that stopped the script (SIGINT for a
            `KeyboardInterrupt`), or None.
    """

    stopped: bool = False
    error: str | None = None
    exit_code: int | None = None
    interrupted: int | None = None


@dataclass(frozen=True)
class ScriptEnd:
    """How the script ended, for the doctor's look at what it left behind (`run_script`'s
    `at_end`).

    Attributes:
        error: it stopped itself on an error: it raised, or called `sys.exit` with a
            status other than 0.
        held: the values its own code held then, each once: the locals of the user's
            frames of the exception's traceback (innermost first) and the script's
            globals; after a clean end, its globals alone (a function's locals are gone).
            Where a loss the script computed and stopped on, never stepping, is found.
    """

    error: bool
    held: tuple[object, ...] = ()


def runner_frame(filename: str) -> bool:
    """True for the frames of the doctor and of the machinery that runs the script
    (`runpy`, which Python 3.11 shows as `<frozen runpy>`, and importlib's)."""
    return (
        is_doctor_file(filename)
        or filename.startswith("<frozen ")
        or os.path.basename(filename) == "runpy.py"
    )


def user_traceback(error: BaseException) -> traceback.StackSummary:
    """The frames of `error`'s traceback, without the doctor's and the runner's."""
    frames = traceback.extract_tb(error.__traceback__)
    return traceback.StackSummary.from_list(f for f in frames if not runner_frame(f.filename))


def print_user_traceback(error: BaseException) -> None:
    """Print the script's exception as Python would, without the doctor's frames."""
    print("Traceback (most recent call last):", file=sys.stderr)
    print("".join(user_traceback(error).format()), end="", file=sys.stderr)
    print("".join(traceback.format_exception_only(error)), end="", file=sys.stderr)


def print_where_stopped(error: Terminated) -> None:
    """Say on stderr where in the user's code a signal stopped the script."""
    frames = [f for f in user_traceback(error) if is_user_file(f.filename)]
    where = ""
    if frames:
        frame = frames[-1]
        where = f" at {display_path(frame.filename)}:{frame.lineno}, in {frame.name}"
    print(
        f"gradient-doctor: the script was stopped by {signal_name(error.signum)}{where}",
        file=sys.stderr,
    )


def exit_outcome(code: object) -> ScriptOutcome:
    """What `sys.exit(code)` in the script means, as Python reads it: None or 0 is
    success, an int is the status, anything else is printed and gives 1."""
    if code is None or code == 0:
        return ScriptOutcome(exit_code=0)
    if isinstance(code, int):
        return ScriptOutcome(error=f"SystemExit: {code}", exit_code=code)
    print(code, file=sys.stderr)
    return ScriptOutcome(error=f"SystemExit: {code}", exit_code=1)


def run_script(
    path: str, args: list[str], at_end: Callable[[ScriptEnd], None] | None = None
) -> ScriptOutcome:
    """Execute `path` as the main module with `sys.argv = [path, *args]`.

    The script's own exceptions are printed in full (nothing is swallowed) and
    returned as text; `TrainingStopped` from the doctor ends the script quietly; a
    `KeyboardInterrupt` is printed as Python prints it, and a SIGTERM (`Terminated`)
    in one line saying where it landed. The working directory is the one run from
    again when it returns.

    `at_end`, when given, is called once the script ended, its own way (not stopped by
    the doctor or a signal), while what it held is still alive: the frames of the
    exception's traceback after an error (the optimizer a function's loop built), and
    what its code held, in a `ScriptEnd` (a loss it computed, found not finite and
    stopped on before any `backward()`).
    """
    saved_argv, saved_path, launched = sys.argv[:], sys.path[:], os.getcwd()
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        # `__file__` absolute, as `python path` sets it (a script that moves its working
        # directory still finds its files next to it); the user's paths stay told
        # relative to the folder run from.
        with paths_relative_to(launched):
            namespace = runpy.run_path(os.path.abspath(path), run_name="__main__")
            _ended(at_end, False, held=tuple(namespace.values()))
    except TrainingStopped:
        return ScriptOutcome(stopped=True)
    except SystemExit as exit_:
        _ended(at_end, exit_.code not in (None, 0), exit_)
        return exit_outcome(exit_.code)
    except KeyboardInterrupt as interrupt:
        print_user_traceback(interrupt)
        return ScriptOutcome(interrupted=int(signal.SIGINT))
    except Terminated as terminated:
        print_where_stopped(terminated)
        return ScriptOutcome(interrupted=terminated.signum)
    except BaseException as error:  # the user's own crash: report it, never hide it
        print_user_traceback(error)
        _ended(at_end, True, error)
        return ScriptOutcome(error=f"{type(error).__name__}: {error}")
    finally:
        sys.argv, sys.path = saved_argv, saved_path
        _return_to(launched)
    return ScriptOutcome()


def _ended(
    at_end: Callable[[ScriptEnd], None] | None,
    error: bool,
    raised: BaseException | None = None,
    held: tuple[object, ...] = (),
) -> None:
    """Call `at_end` (the doctor's look at how the script left things) with what the
    script held (`held`, or the values of the user's frames `raised` unwound): its own
    failure is said, never raised over the script's outcome."""
    if at_end is None:
        return
    if raised is not None:
        held = _held_in(raised.__traceback__)
    try:
        at_end(ScriptEnd(error, held))
    except TrainingStopped:
        pass
    except Exception as error:  # never let the doctor's analysis change the script's outcome
        print(
            f"gradient-doctor: could not check how the script ended "
            f"({type(error).__name__}: {error})",
            file=sys.stderr,
        )


def _held_in(trace: TracebackType | None) -> tuple[object, ...]:
    """The values the user's frames of a traceback hold, innermost first, each once."""
    frames = []
    while trace is not None:
        if is_user_file(trace.tb_frame.f_code.co_filename):
            frames.append(trace.tb_frame)
        trace = trace.tb_next
    seen: dict[int, object] = {}
    for frame in reversed(frames):
        for value in list(frame.f_locals.values()):
            seen.setdefault(id(value), value)
    return tuple(seen.values())


def _return_to(folder: str) -> None:
    """Move back to the folder run from, which a script's `os.chdir` may have left: the
    reports, patches and reruns that follow are all relative to it."""
    try:
        os.chdir(folder)
    except OSError:  # removed by the script: the reports' paths are absolute anyway
        pass
