"""gradient-doctor: find out why training goes NaN, and prove the fix.

Public API (everything else is internal):
- `Doctor`: the Keras callback for `model.fit`.
- `watch`: the wrapper for custom `tf.GradientTape` training steps.
- `ops`: numerically safe drop-ins (`safe_norm`, `stable_softmax`, ...).
- `Report`, `Finding`, `Origin`, `Fix`, `NotFix`, `SourceLine`: the results, for
  reading a report in Python (frozen dataclasses; the JSON report serialises them).
- `DoctorError`, `TrainingStopped`, `UsageError`: the exceptions.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import TYPE_CHECKING

from gradient_doctor.core.findings import Finding, Fix, NotFix, Origin, SourceLine
from gradient_doctor.core.report import Report
from gradient_doctor.errors import DoctorError, TrainingStopped, UsageError

if TYPE_CHECKING:  # imported lazily at run time: they load TensorFlow
    from gradient_doctor import ops
    from gradient_doctor.tf_adapter.hooks.callback import Doctor
    from gradient_doctor.tf_adapter.hooks.watch_api import watch

__all__ = [
    "Doctor",
    "DoctorError",
    "Finding",
    "Fix",
    "NotFix",
    "Origin",
    "Report",
    "SourceLine",
    "TrainingStopped",
    "UsageError",
    "ops",
    "watch",
]

try:  # the version is written once, in pyproject.toml
    __version__ = importlib.metadata.version("gradient-doctor")
except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
    __version__ = "0+unknown"

# Public names that load TensorFlow: imported on first use, so that reading a report
# (or `gradient-doctor --help`) does not.
_LAZY = {
    "Doctor": "gradient_doctor.tf_adapter.hooks.callback",
    "watch": "gradient_doctor.tf_adapter.hooks.watch_api",
}


def __getattr__(name: str):
    if name == "ops":
        # importlib, not `from gradient_doctor import ops`: that asks this function again.
        return importlib.import_module("gradient_doctor.ops")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gradient_doctor' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
