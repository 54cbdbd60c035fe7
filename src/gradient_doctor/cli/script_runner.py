"""Run a Python script as `python SCRIPT ARGS` would: same argv, `__main__`, import path."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from dataclasses import dataclass

from gradient_doctor.errors import TrainingStopped


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
        traceback.print_exception(error)
        return ScriptOutcome(error=f"{type(error).__name__}: {error}")
    finally:
        sys.argv, sys.path = saved_argv, saved_path
    return ScriptOutcome()
