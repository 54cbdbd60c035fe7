"""The user's warnings shown at the user's line, even when the doctor's hook ran the op.

PyTorch issues a warning from C++ (`TORCH_WARN`: "Converting a tensor with
requires_grad=True to a scalar ...") at the innermost Python frame. While a step is
sampled, a `TorchFunctionMode` of the doctor's sits between the user's line and the
op, so the warning would be shown at `module_stats.py` instead of `train.py:62`, and
once more from the user's line at the next step that is not sampled. While installed,
a warning placed in one of the doctor's files is issued again from the innermost
frame of the user's, with that module's own registry: shown and filtered exactly as the
plain run shows and filters it (once per line under the default filter). The doctor's
own warnings ("gradient-doctor: ...") keep their place.
"""

from __future__ import annotations

import sys
import warnings

from gradient_doctor.core.attribute_patches import AttributePatches
from gradient_doctor.core.source_frames import is_doctor_file
from gradient_doctor.torch_adapter.localize.source_lines import is_user_file

_OWN = "gradient-doctor"


class WarningLines:
    """Installs the relocation of warnings placed in the doctor's files."""

    def __init__(self) -> None:
        self._patches = AttributePatches()

    def install(self) -> None:
        shown = warnings.showwarning
        self._patches.replace(warnings, "showwarning", self._relocating(shown))

    def uninstall(self) -> None:
        self._patches.restore()

    @staticmethod
    def _relocating(shown):
        def showwarning(message, category, filename, lineno, file=None, line=None):
            if not is_doctor_file(filename) or str(message).startswith(_OWN):
                return shown(message, category, filename, lineno, file, line)
            frame = sys._getframe(1)
            while frame is not None and not is_user_file(frame.f_code.co_filename):
                frame = frame.f_back
            if frame is None:  # no user frame on the stack: as it was
                return shown(message, category, filename, lineno, file, line)
            user = frame.f_globals
            warnings.warn_explicit(
                message,
                category,
                frame.f_code.co_filename,
                frame.f_lineno,
                module=user.get("__name__"),
                registry=user.setdefault("__warningregistry__", {}),
                module_globals=user,
            )
            return None

        return showwarning
