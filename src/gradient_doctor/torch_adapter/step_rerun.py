"""The seeded rerun: the user's script run again in a child process to record its failing step.

An unchanged script's loop is no function the doctor can call again, so its failing
step is replayed by running the script again from the start, in a child process, with
what the run started from: the same arguments, working folder, import path and
environment, and the random generators' states read before the script first ran
(`start_rng`). The child follows the run's trajectory under the same update hooks,
records the failing step (`step_recording`), writes its op events as JSON and stops.
A script that does not repeat itself (it reads the clock, unseeded CUDA draws, data
that changed) reruns differently: the answer then says the failure was not reached
or not reproduced. Run as `python -m gradient_doctor.torch_adapter.step_rerun REQUEST`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from gradient_doctor.torch_adapter import start_rng, step_events
from gradient_doctor.torch_adapter.step_events import RecordedStep

# The rerun's time limit: this many times as long as the run took to reach the step,
# and never under the floor (the child imports torch again).
RERUN_TIME_FACTOR = 3.0
RERUN_MIN_SECONDS = 60.0


@dataclass(frozen=True)
class ScriptStart:
    """What the user's script started from, read just before it first ran.

    Attributes:
        script: the script's path as the user gave it.
        args: its arguments.
        cwd: the working folder.
        sys_path: the import path.
        env: the environment variables.
        rng: the random generators' states (`start_rng.read`).
        started: `time.monotonic()` then.
    """

    script: str
    args: tuple[str, ...]
    cwd: str
    sys_path: tuple[str, ...]
    env: dict[str, str] = field(repr=False)
    rng: dict = field(repr=False)
    started: float

    @classmethod
    def now(cls, script: str, args: list[str]) -> ScriptStart:
        """The start state as it is now (call it right before the script runs)."""
        return cls(
            script,
            tuple(args),
            os.getcwd(),
            tuple(sys.path),
            dict(os.environ),
            start_rng.read(),
            time.monotonic(),
        )


def rerun_step(start: ScriptStart, window_after: int, failing: int) -> tuple[RecordedStep, float]:
    """Run the script again from `start` and record the step ending at update `failing`.

    Args:
        start: what the run started from.
        window_after: the update after which the failing step began (-1: the first step).
        failing: the failing update's index (over every optimizer of the run).

    Returns:
        What the child recorded, and how long the rerun took (wall seconds).
    """
    timeout = max(RERUN_TIME_FACTOR * (time.monotonic() - start.started), RERUN_MIN_SECONDS)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gradient-doctor-step-") as scratch:
        request, out = os.path.join(scratch, "request.json"), os.path.join(scratch, "step.json")
        with open(request, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "script": start.script,
                    "args": list(start.args),
                    "sys_path": list(start.sys_path),
                    "rng": start.rng,
                    "window_after": window_after,
                    "failing": failing,
                    "out": out,
                },
                handle,
            )
        command = [sys.executable, "-m", __name__, request]
        try:
            child = subprocess.run(
                command,
                cwd=start.cwd,
                env=start.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            why = f"the rerun of your script ran past {timeout:.0f} s and was stopped"
            return RecordedStep(False, why=why), time.monotonic() - began
        seconds = time.monotonic() - began
        if os.path.exists(out):
            return step_events.read(out), seconds
        last = (child.stderr or "").strip().splitlines()
        detail = f": {last[-1]}" if last else ""
        why = f"the rerun of your script exited with status {child.returncode}{detail}"
        return RecordedStep(False, why=why), seconds


def main(request_path: str) -> int:
    """The child: restore the start, run the script, record the failing step."""
    from gradient_doctor.cli.script_runner import run_script
    from gradient_doctor.torch_adapter.step_recording import StepRecording

    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    sys.path[:] = request["sys_path"]
    start_rng.restore(request["rng"])
    recording = StepRecording(request["window_after"], request["failing"], request["out"])
    recording.install()
    try:
        outcome = run_script(request["script"], request["args"])
    finally:
        recording.uninstall()
    if not os.path.exists(request["out"]):
        ended = f"it failed ({outcome.error})" if outcome.error else "it ended"
        step_events.write(
            request["out"],
            RecordedStep(
                False,
                why=f"the rerun of your script never reached update {request['failing']}: "
                f"{ended} first",
            ),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
