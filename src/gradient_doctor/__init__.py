"""gradient-doctor: find out why training goes NaN, and prove the fix.

Public API (everything else is internal):
- `Doctor`: the Keras callback for `model.fit`.
- `watch`: the wrapper for custom `tf.GradientTape` training steps.
- `ops`: numerically safe drop-ins (`safe_norm`, `stable_softmax`, ...).
- `Report`, `Finding`: the results.
- `DoctorError`, `TrainingStopped`, `UsageError`: the exceptions.
"""

import importlib
import importlib.metadata

from gradient_doctor.core.findings import Finding
from gradient_doctor.core.report import Report
from gradient_doctor.errors import DoctorError, TrainingStopped, UsageError

__all__ = [
    "Doctor",
    "DoctorError",
    "Finding",
    "Report",
    "TrainingStopped",
    "UsageError",
    "ops",
    "watch",
]

try:  # the version is written once, in pyproject.toml
    __version__ = importlib.metadata.version("gradient-doctor")
except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
    __version__ = "0+unknown"


def __getattr__(name: str):
    # TensorFlow is imported only when a TensorFlow-facing name is used.
    if name == "Doctor":
        from gradient_doctor.tf_adapter.callback import Doctor

        return Doctor
    if name == "ops":
        # importlib, not `from gradient_doctor import ops`: that asks this function again.
        return importlib.import_module("gradient_doctor.ops")
    if name == "watch":
        from gradient_doctor.tf_adapter.watch_api import watch

        return watch
    raise AttributeError(f"module 'gradient_doctor' has no attribute {name!r}")
