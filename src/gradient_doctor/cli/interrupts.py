"""SIGTERM and SIGINT during `gradient-doctor run`: the script stops, every report is written."""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How often a held signal is raised again while the doctor finishes diagnosing a step.
_RETRY_SECONDS = 0.1
_RUNNING, _REPORTING = "running", "reporting"


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that the script's frames unwind.

    A `BaseException`, like `KeyboardInterrupt`: an `except Exception` in the script,
    in Keras or in TensorFlow does not swallow it, and their `finally` blocks run.

    Attributes:
        signum: int, the signal's number.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal_name(signum)}")


def signal_name(signum: int) -> str:
    """ "SIGTERM" for 15, "SIGINT" for 2."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class RunInterrupts:
    """Turn SIGINT and SIGTERM into an orderly end of the run, for as long as it is entered.

    While the script runs, the signal is raised in the main thread: SIGINT as
    `KeyboardInterrupt` (as Python does), SIGTERM as `Terminated`. Where it lands in
    the doctor's diagnosis of a step (a frame of a `protect`ed function is on the
    stack), inside a framework's writing of a checkpoint or model file (a Keras
    `ModelCheckpoint` saving, `torch.save`: cut short, the file the user had is left
    half written), or outside the script (the doctor starting up or finishing), it is
    held, said on stderr, and raised as soon as the script runs outside them; a second
    signal raises at once.
    After `reporting()` a signal is only noted, and a second one ends the process
    at once (the reports being written are then lost).

    Without a main thread to handle signals (the CLI called from another thread),
    nothing is installed and the signals keep their handlers.

    Args:
        script_code: the code object of the function that runs the script (a signal
            landing in a frame below it stops the script).

    Attributes:
        signum: the number of the first signal received, or None.
    """

    def __init__(self, script_code: CodeType) -> None:
        self._script_code = script_code
        self._protected: frozenset[CodeType] = frozenset()
        self.signum: int | None = None
        self._phase = _RUNNING
        self._held = False
        self._retrying = False
        self._retrier: threading.Thread | None = None
        self._saved: dict[int, object] = {}

    def __enter__(self) -> RunInterrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._saved[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop_retrying()
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)
        self._saved.clear()

    def protect(self, *functions: Callable) -> None:
        """Never cut these functions of the doctor's (its diagnosis) short on a first signal."""
        self._protected |= {function.__code__ for function in functions}

    def reporting(self) -> None:
        """From now on the reports are written: a signal is noted, a second one exits."""
        self._phase = _REPORTING
        self._stop_retrying()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        retry, self._retrying = self._retrying, False
        if retry and not self._held:
            return  # a retry that arrived after the held signal was raised or dropped
        again = self.signum is not None and not retry
        if self.signum is None:
            self.signum = signum
        if self._phase == _REPORTING:
            if again:
                _exit_now(signum, "while the reports were written; some may be missing")
            if not retry:
                _say(f"{signal_name(signum)} received; writing the reports first")
            return
        in_script, protected, saving = self._where(frame)
        if in_script and (again or not (protected or saving)):
            self._held = False
            raise KeyboardInterrupt if self.signum == signal.SIGINT else Terminated(self.signum)
        if again:
            _exit_now(signum, "before the script started or after it ended")
        if not self._held:
            self._held = True
            name = signal_name(signum)
            if saving and not protected:
                when = "while your script writes a file (a checkpoint); it stops once written"
            elif in_script:
                when = "while the doctor diagnoses a step; the script stops once that is done"
            else:
                when = (
                    "outside the script (the doctor is starting or finishing); the run ends "
                    "at the first chance"
                )
            _say(
                f"{name} received {when}, with every report written (send {name} again to stop now)"
            )
            self._retrier = threading.Thread(target=self._retry_held, daemon=True)
            self._retrier.start()

    def _where(self, frame: FrameType | None) -> tuple[bool, bool, bool]:
        """Whether `frame` runs under the script, under the doctor's diagnosis, and
        inside a framework's writing of a file (`writes_a_file`)."""
        protected = saving = False
        while frame is not None:
            if frame.f_code in self._protected:
                protected = True
            saving = saving or writes_a_file(frame.f_code)
            if frame.f_code is self._script_code:
                return True, protected, saving
            frame = frame.f_back
        return False, protected, saving

    def _retry_held(self) -> None:
        """Hand the held signal to the main thread again and again until it is raised."""
        pause = threading.Event()
        while self._held:
            pause.wait(_RETRY_SECONDS)
            if self._held and self.signum is not None:
                self._retrying = True
                _thread.interrupt_main(self.signum)

    def _stop_retrying(self) -> None:
        # Joined before the handlers are restored: no retry may reach the script's own.
        self._held = False
        if self._retrier is not None and self._retrier is not threading.current_thread():
            self._retrier.join()
        self._retrier = None


# Where the frameworks write checkpoints and model files: (a folder of the file's path,
# the functions there, or None for every function in it).
_FILE_WRITERS = (
    (f"keras{os.sep}src{os.sep}saving{os.sep}", None),
    (f"keras{os.sep}src{os.sep}legacy{os.sep}saving{os.sep}", None),
    (f"tensorflow{os.sep}python{os.sep}checkpoint{os.sep}", None),
    (f"tensorflow{os.sep}python{os.sep}saved_model{os.sep}", None),
    (f"torch{os.sep}serialization.py", frozenset({"save", "_save", "_legacy_save"})),
    (f"safetensors{os.sep}", frozenset({"save_file", "save_model"})),
)


def writes_a_file(code: CodeType) -> bool:
    """Whether `code` is a framework's function that writes a checkpoint or a model file,
    which a signal must not cut short (the user's previous file would be half overwritten)."""
    return any(
        folder in code.co_filename and (names is None or code.co_name in names)
        for folder, names in _FILE_WRITERS
    )


def _say(text: str) -> None:
    print(f"gradient-doctor: {text}", file=sys.stderr, flush=True)


def _exit_now(signum: int, when: str) -> None:
    """End the process at once on a second signal, with the status a signal gives."""
    _say(f"{signal_name(signum)} received again {when}; exiting now")
    sys.stdout.flush()
    os._exit(128 + signum)
