"""Run a Python script as `python SCRIPT ARGS` would: same argv, `__main__`, import path."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from dataclasses import dataclass

from gradient_doctor.errors import TrainingStopped
from gradient_doctor.tf_adapter.source_frames import is_doctor_file


@dataclass(frozen=True)
class ScriptOutcome:
    """How the script ended.

    Attributes:
        stopped: the doctor stopped training (a problem was diagnosed).
        error: the script's own exception, as "Type: message", or None.
        exit_code: the code the script passed to `sys.exit`, if any.
    """

    stopped: bool = False
    error: str | None = None
    exit_code: int | None = None


def print_user_traceback(error: BaseException) -> None:
    """Print the script's exception with the doctor's and the runner's frames left out."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not is_doctor_file(frame.filename) and not frame.filename.endswith("runpy.py")
    ]
    print("Traceback (most recent call last):", file=sys.stderr)
    print("".join(traceback.format_list(frames)), end="", file=sys.stderr)
    print("".join(traceback.format_exception_only(error)), end="", file=sys.stderr)


def run_script(path: str, args: list[str]) -> ScriptOutcome:
    """Execute `path` as the main module with `sys.argv = [path, *args]`.

    The script's own exceptions are printed in full (nothing is swallowed) and
    returned as text; `TrainingStopped` from the doctor ends the script quietly.
    """
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        runpy.run_path(path, run_name="__main__")
    except TrainingStopped:
        return ScriptOutcome(stopped=True)
    except SystemExit as exit_:
        code = exit_.code
        if code in (None, 0):
            return ScriptOutcome(exit_code=0)
        return ScriptOutcome(error=f"the script exited with status {code}", exit_code=1)
    except BaseException as error:  # the user's own crash: report it, never hide it
        print_user_traceback(error)
        return ScriptOutcome(error=f"{type(error).__name__}: {error}")
    finally:
        sys.argv, sys.path = saved_argv, saved_path
    return ScriptOutcome()
