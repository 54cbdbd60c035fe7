"""The user's frame in a stack: the core's source-frame filter, under its earlier import path.

The filter is framework-neutral and lives in `core/source_frames.py` (the PyTorch
adapter uses it too); the TensorFlow adapter's modules still import it from here
until they move into their stage folders.
"""

from gradient_doctor.core.source_frames import (
    display_path,
    is_doctor_file,
    is_user_file,
    user_frame,
    user_line,
)

__all__ = ["display_path", "is_doctor_file", "is_user_file", "user_frame", "user_line"]
