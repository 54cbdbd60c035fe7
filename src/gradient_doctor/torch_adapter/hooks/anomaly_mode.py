"""`torch.autograd`'s anomaly mode, left off while `gradient-doctor run` watches a script.

`torch.autograd.set_detect_anomaly(True)` (or `with torch.autograd.detect_anomaly():`)
makes a backward pass raise at the first node that returns NaN, with the forward
traceback that created it: the script then stops inside `backward()`, before any
`optimizer.step()`, so the doctor never sees the failing update, and every step runs
1.5-3x slower. The doctor does that job: it stops at the first non-finite gradient
before it reaches the weights and names the op, its line and what made it. So while it
watches, both spellings are accepted and change nothing (a NaN that never reaches a
parameter's gradient, which anomaly mode would also stop on, does not stop a watched
run); it says so once.
"""

from __future__ import annotations

import sys

import torch

NOTE = (
    "gradient-doctor: torch.autograd's anomaly detection is left off while the doctor "
    "watches: the doctor stops at the first non-finite gradient itself and names the op "
    "that made it (run your script without the doctor to use it)"
)
_NAMES = ("set_detect_anomaly", "detect_anomaly")


class _LeftOff:
    """Takes anomaly mode's arguments, as a call or a context manager, and does nothing."""

    _said = False

    def __init__(self, *args, **kwargs) -> None:
        if not _LeftOff._said:
            _LeftOff._said = True
            print(NOTE, file=sys.stderr, flush=True)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info) -> bool:
        return False

    def __call__(self, function):  # used as a decorator
        return function


class AnomalyModeLeftOff:
    """Replaces `torch.autograd.set_detect_anomaly` and `detect_anomaly` until uninstalled
    (installing twice is installing once)."""

    def __init__(self) -> None:
        self._saved: dict[str, object] = {}

    def install(self) -> None:
        if self._saved or getattr(torch.autograd, _NAMES[0]) is _LeftOff:
            return
        self._saved = {name: getattr(torch.autograd, name) for name in _NAMES}
        for name in _NAMES:
            setattr(torch.autograd, name, _LeftOff)

    def uninstall(self) -> None:
        for name, value in self._saved.items():
            setattr(torch.autograd, name, value)
        self._saved = {}
