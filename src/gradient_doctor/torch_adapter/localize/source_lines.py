"""The user's own line of an op running now: the innermost frame outside torch and the doctor."""

from __future__ import annotations

import os
import sys
from functools import lru_cache

import torch

from gradient_doctor.core import source_frames
from gradient_doctor.core.findings import SourceLine

# torch's own package, wherever it is installed (a source build lies outside site-packages).
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


@lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """Whether `filename` is the user's code: not torch's, a library's or the doctor's."""
    return source_frames.is_user_file(filename) and not os.path.abspath(filename).startswith(
        _TORCH_DIR
    )


def user_line() -> SourceLine | None:
    """The user's line on the current stack (with the expression that is running)."""
    return source_frames.user_line(sys._getframe(1), is_user_file)
