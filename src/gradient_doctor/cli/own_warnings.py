"""The doctor's own warnings, shown on the command line as plain lines.

Python shows a warning with the file and line that issued it and that line's source:
for the doctor's own ("gradient-doctor: step 17 failed too, under --keep-going; ..."),
a path inside the doctor's package and a line of its code, which say nothing to the
user. While installed, a warning whose message starts with "gradient-doctor" is
written to stderr as its message alone; every other warning is shown as before.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator

_OWN = "gradient-doctor"


@contextlib.contextmanager
def plain_own_warnings() -> Iterator[None]:
    """While the block runs, show the doctor's own warnings as their message alone."""
    shown = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if not str(message).startswith(_OWN):
            return shown(message, category, filename, lineno, file, line)
        stream = file if file is not None else sys.stderr
        try:
            stream.write(f"{message}\n")
        except OSError:  # as Python's own: a stream that cannot be written loses it
            pass
        return None

    warnings.showwarning = showwarning
    try:
        yield
    finally:
        if warnings.showwarning is showwarning:
            warnings.showwarning = shown
