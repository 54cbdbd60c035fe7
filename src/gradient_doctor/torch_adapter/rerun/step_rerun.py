"""The seeded rerun: the user's script run again in another process to record its failing step.

An unchanged script's loop is no function the doctor can call again, so its failing
step is replayed by running the script again from the start, in another process, from
exactly what the run started from. Where the system can fork (Linux, macOS), that is
a fork of the doctor made just before the script first ran, waiting on a pipe: it holds
the same arguments, working folder, import path, environment, hash seed and random
generators' states, and torch already imported (a fresh interpreter would spend seconds
importing it again). Elsewhere a fresh interpreter is started and given the start state
(`ScriptStart`: the generators' states read with `start_rng`). A fork copies the locks
that other threads of the doctor's process held at that moment but never their owners
(a thread drawing from torch's generator, in a process that runs other work beside the
doctor): a forked rerun that then sits on such a lock, using no CPU, is stopped and run
again in a fresh interpreter, as are the reruns after it. Either way the rerun
follows the run's trajectory under the same update hooks, records the failing step
(`step_recording`), writes its op events as JSON and stops. A script that does not repeat
itself (it reads the clock, unseeded CUDA draws, data that changed) reruns differently:
the answer then says the failure was not reached or not reproduced.

The rerun runs in a scratch copy of the working folder (`cli.scratch_copy`), never in the
user's: what the script writes before the failing step (a log it appends to, checkpoints,
events files) is written there, once more, and the user's files hold what one run wrote.
The copy leaves out what the run made (the folder was listed before the script ran: a
checkpoint the script resumes from when present is not there to resume from); the rerun
changes into it, with the import path's entries into the folder and the script's path
pointed at the copy's, and runs under the copy's write guard (`cli.write_guard`), which
stops a write to the user's own files through the copy's links or by absolute paths.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace

from gradient_doctor.cli import write_guard
from gradient_doctor.cli.outside_paths import OutsidePaths
from gradient_doctor.cli.scratch_copy import copy_folder, folder_listing
from gradient_doctor.torch_adapter.rerun import start_rng, step_events
from gradient_doctor.torch_adapter.rerun.step_events import RecordedStep

# The rerun's time limit: this many times as long as the run took to reach the step,
# and never under the floor.
RERUN_TIME_FACTOR = 3.0
RERUN_MIN_SECONDS = 60.0
# A forked rerun that used no CPU for this long sits on a lock another thread of the
# doctor's process held when it forked (a fork copies the lock, never its owner): it
# would wait forever, so it is stopped and run again in a new interpreter.
STALL_SECONDS = 15.0
STALLED = "stalled"  # `_ForkedStart.run`'s answer for such a rerun


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


class StepReruns:
    """Reruns of one script from its start, each recording one failing step.

    Create it right before the script first runs (it forks then, where it can), and
    `close()` it after.

    Args:
        script: the script's path as the user gave it.
        args: its arguments.
    """

    def __init__(self, script: str, args: list[str]) -> None:
        self.start = ScriptStart.now(script, args)
        self._listing = folder_listing(self.start.cwd)  # what a rerun's copy may hold
        self._fork = None
        if hasattr(os, "fork"):
            # The first `torch.optim.Optimizer` made imports torch._dynamo (1-3 s here):
            # imported before the fork, every rerun finds it loaded. The run would
            # import it a moment later anyway, and the import draws no random number.
            import torch._dynamo  # noqa: F401

            self._fork = _ForkedStart(self.start.rng)

    def close(self) -> None:
        """End the waiting fork."""
        if self._fork is not None:
            self._fork.close()
            self._fork = None

    def record(
        self, window_after: int, failing: int, paths: bool = False, tape: bool = False
    ) -> tuple[RecordedStep, float]:
        """Run the script again from its start and record the step ending at update `failing`.

        Args:
            window_after: the update after which the failing step began (-1: the first).
            failing: the failing update's index (over every optimizer of the run).
            paths: record where the paths to the parameters that update leaves without
                a gradient break (`StepRecording`'s `paths`).
            tape: also record the step's tape for `--dump` (`torch_adapter.dump`); it
                is moved out of the rerun's scratch folder to a folder of its own,
                named by the answer's `tape`, which the caller removes.

        Returns:
            What the rerun recorded, and how long it took (wall seconds).
        """
        timeout = max(
            RERUN_TIME_FACTOR * (time.monotonic() - self.start.started), RERUN_MIN_SECONDS
        )
        began = time.monotonic()
        wanted = {"window_after": window_after, "failing": failing, "paths": paths, "tape": tape}
        with tempfile.TemporaryDirectory(prefix=f"{write_guard.SCRATCH_PREFIX}step-") as scratch:
            if self._fork is not None:
                answer = self._attempt(os.path.join(scratch, "fork"), wanted, timeout)
                if answer is not None:
                    return answer, time.monotonic() - began
                print(
                    f"gradient-doctor: the rerun forked from this process used no CPU for "
                    f"{STALL_SECONDS:.0f} s (it waits on a lock another thread held when it "
                    "forked); running it again in a new interpreter",
                    file=sys.stderr,
                    flush=True,
                )
                self.close()
            answer = self._attempt(os.path.join(scratch, "fresh"), wanted, timeout)
        return answer, time.monotonic() - began

    def _attempt(self, scratch: str, wanted: dict, timeout: float) -> RecordedStep | None:
        """One rerun in a copy under `scratch`: what it recorded, or None when the fork
        it ran in stalled (`STALLED`).

        Args:
            scratch: an empty folder's path for the copy, the request and the answer.
            wanted: `record`'s window_after, failing, paths and tape.
            timeout: the rerun's time limit in seconds.
        """
        os.makedirs(scratch)
        copy = copy_folder(self.start.cwd, os.path.join(scratch, "copy"), self._listing)
        # A script outside the folder run from runs from where it is: its folder is
        # guarded too, so the rerun writes none of the user's files there.
        script_folder = os.path.dirname(os.path.abspath(self.start.script))
        guard = copy.guard(os.path.join(scratch, "refused.log"), also=(script_folder,))
        # Paths leading out of the folder read from the copy as from the run; a file
        # there the rerun writes is put back afterwards.
        outside = OutsidePaths(list(self.start.args), self.start.cwd, scratch)
        request = {
            "script": copy.mapped(self.start.script),
            "args": outside.rerun_args,
            "cwd": copy.root,
            "sys_path": [copy.mapped(path) for path in self.start.sys_path],
            "guard": guard.save(os.path.join(scratch, "guard.json")),
            **{key: wanted[key] for key in ("window_after", "failing", "paths")},
            "out": os.path.join(scratch, "step.json"),
            "tape": os.path.join(scratch, "tape") if wanted["tape"] else None,
        }
        with outside:
            if self._fork is not None:
                ended = self._fork.run(request, timeout)
            else:
                ended = _fresh_interpreter(self.start, request, scratch, timeout)
        if ended == STALLED:
            return None
        if ended is None:
            why = f"the rerun of your script ran past {timeout:.0f} s and was stopped"
            recorded = RecordedStep(False, why=why)
        elif os.path.exists(request["out"]):
            recorded = _with_tape(step_events.read(request["out"]), request["tape"])
        else:
            recorded = RecordedStep(False, why=f"the rerun of your script {ended}")
        trespass = copy.trespass(guard)
        if trespass is not None and not recorded.reached:
            return RecordedStep(False, why=trespass)
        if trespass is not None:  # recorded all the same: said, never passed over
            print(f"gradient-doctor: {trespass}", file=sys.stderr, flush=True)
        return recorded


def _with_tape(recorded: RecordedStep, tape: str | None) -> RecordedStep:
    """`recorded` with its tape moved out of the scratch folder, when the rerun wrote one."""
    if tape is None or not recorded.reached or not os.path.isdir(tape):
        return recorded
    kept = tempfile.mkdtemp(prefix="gradient-doctor-tape-")
    for name in os.listdir(tape):
        shutil.move(os.path.join(tape, name), os.path.join(kept, name))
    return replace(recorded, tape=kept)


class _ForkedStart:
    """A fork of the doctor, made before the script ran, that forks a rerun per request.

    It waits on a pipe; each request (one JSON line) is run in a fork of its own, so
    every rerun starts from the same state; its process id and then its exit status
    come back on the other pipe. The pipe's end (the doctor exiting) ends it. Each
    rerun puts the generators back to `rng` first: Python reseeds `random` in every
    forked child.

    Args:
        rng: the generators' states before the script ran (`start_rng.read`).
    """

    def __init__(self, rng: dict) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        requests_read, self._requests = os.pipe()
        self._replies, replies_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the waiting fork: never returns
            os.close(self._requests)
            os.close(self._replies)
            try:
                _serve(requests_read, replies_write, rng)
            finally:
                os._exit(0)
        os.close(requests_read)
        os.close(replies_write)
        self._buffer = b""

    def run(self, request: dict, timeout: float) -> str | None:
        """Run `request` in a fresh fork: how it ended, None when it ran past `timeout`,
        or `STALLED` when it used no CPU for `STALL_SECONDS` (then it is stopped)."""
        os.write(self._requests, json.dumps(request).encode() + b"\n")
        worker = int(self._line(STALL_SECONDS) or 0)
        if not worker:
            return STALLED
        deadline = time.monotonic() + timeout
        busy = _CpuWatch(worker)
        status = None
        while status is None:
            left = deadline - time.monotonic()
            if left <= 0 or busy.stalled():
                os.kill(worker, signal.SIGKILL)
                self._line(STALL_SECONDS)  # its status, now that it was stopped
                return None if left <= 0 else STALLED
            status = self._line(min(left, 1.0))
        code = os.waitstatus_to_exitcode(int(status or 0))
        return "ended" if code == 0 else f"exited with status {code}"

    def close(self) -> None:
        """End the waiting fork: it exits when its pipe ends; one stuck is stopped."""
        os.close(self._requests)
        os.close(self._replies)
        waited = time.monotonic()
        while not os.waitpid(self.pid, os.WNOHANG)[0]:
            if time.monotonic() - waited > STALL_SECONDS:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return
            time.sleep(0.02)

    def _line(self, timeout: float | None) -> str | None:
        """The next reply line ("" when the fork is gone), or None after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not select.select([self._replies], [], [], left)[0]:
                return None
            chunk = os.read(self._replies, 4096)
            if not chunk:
                return ""
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()


class _CpuWatch:
    """Whether a process has used no CPU for `STALL_SECONDS` (read from /proc; where
    there is none, it never says so and only the time limit stops the rerun)."""

    def __init__(self, pid: int) -> None:
        self._stat = f"/proc/{pid}/stat"
        self._ticks = self._read()
        self._since = time.monotonic()

    def stalled(self) -> bool:
        ticks = self._read()
        if ticks is None:
            return False
        if ticks != self._ticks:
            self._ticks, self._since = ticks, time.monotonic()
        return time.monotonic() - self._since >= STALL_SECONDS

    def _read(self) -> int | None:
        """User and system clock ticks so far (fields 14 and 15 of the stat line)."""
        try:
            with open(self._stat, encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return int(fields[11]) + int(fields[12])


def _serve(requests: int, replies: int, rng: dict) -> None:
    """The waiting fork's loop: one forked rerun per request line, until the pipe ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the doctor handles the user's Ctrl-C
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = os.read(requests, 65536)
            if not chunk:
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        worker = os.fork()
        if worker == 0:
            os.close(requests)
            os.close(replies)
            try:
                _quiet()
                signal.signal(signal.SIGINT, signal.default_int_handler)
                start_rng.restore(rng)
                _record(json.loads(line))
            finally:
                os._exit(0)
        os.write(replies, f"{worker}\n".encode())
        _, status = os.waitpid(worker, 0)
        os.write(replies, f"{status}\n".encode())


def _fresh_interpreter(start: ScriptStart, request: dict, scratch: str, timeout: float):
    """Run `request` in a new interpreter given the start state; how it ended, or None."""
    path = os.path.join(scratch, "request.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({**request, "rng": start.rng}, handle)
    try:
        child = subprocess.run(
            [sys.executable, "-m", __name__, path],
            cwd=request["cwd"],
            env=start.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    return "ended" if child.returncode == 0 else f"exited with status {child.returncode}"


def _quiet() -> None:
    """The rerun reads nothing and prints nothing (the script ran once already): not
    through the standard descriptors, nor through a `sys.stdout` that writes elsewhere
    (a capture's file, a logger's stream)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115


def _record(request: dict) -> None:
    """In the rerun's process: move into the copy, guard the user's files, run the script
    under the recording; say so when it never reached the failing update."""
    from gradient_doctor.cli.script_runner import run_script
    from gradient_doctor.torch_adapter.rerun.step_recording import StepRecording

    os.chdir(request["cwd"])
    sys.path[:] = request["sys_path"]
    write_guard.install(write_guard.WriteGuard.load(request["guard"]))

    recording = StepRecording(
        request["window_after"],
        request["failing"],
        request["out"],
        request.get("paths", False),
        tape=request.get("tape"),
    )
    recording.install()
    try:
        outcome = run_script(request["script"], request["args"], recording.script_ended)
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


def main(request_path: str) -> int:
    """A fresh interpreter's rerun: restore the start state, then record."""
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    start_rng.restore(request["rng"])
    _record(request)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
