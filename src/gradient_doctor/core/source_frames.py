"""Find the user's own frame in a Python stack, skipping library and doctor frames."""

from __future__ import annotations

import itertools
import linecache
import os
import sys
import sysconfig
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from types import FrameType

from gradient_doctor.core.findings import SourceLine

_DOCTOR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple(
    {
        os.path.abspath(p)
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_paths().get(key))
    }
)
# Files TensorFlow writes for converted functions, and other non-files.
_GENERATED_MARKERS = ("__autograph_generated_file", "<frozen", "<string>", "<__array_function")


def is_doctor_file(filename: str) -> bool:
    """True for the doctor's own modules."""
    return os.path.abspath(filename).startswith(_DOCTOR_DIR + os.sep)


@lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """True when `filename` is the user's code: not the stdlib, a package, or the doctor."""
    if any(marker in filename for marker in _GENERATED_MARKERS):
        return False
    if is_doctor_file(filename):
        return False
    path = os.path.abspath(filename)
    if "site-packages" in path or "dist-packages" in path:
        return False
    return not any(path.startswith(d + os.sep) for d in _LIBRARY_DIRS)


# The folder display paths are relative to while a script runs (`paths_relative_to`);
# None: the working directory.
_root: str | None = None


def user_frame_values(frame: FrameType | None) -> Iterator[object]:
    """Every value the user's frames hold, from `frame` outward (innermost first): each
    frame's locals, then its globals. Where an adapter finds the objects a failing step
    came from that no hook handed it (the dataset a loop reads from)."""
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            for namespace in (frame.f_locals, frame.f_globals):
                yield from list(namespace.values())
        frame = frame.f_back


def display_root() -> str:
    """The folder the user's paths are told relative to: the one the run started from
    while `paths_relative_to` holds it (a script may `os.chdir` away), else the working
    directory."""
    return _root or os.getcwd()


@contextmanager
def paths_relative_to(root: str) -> Iterator[None]:
    """Tell the user's paths relative to `root` (the folder run from) inside the block,
    wherever the script moves its working directory."""
    global _root
    saved, _root = _root, os.path.abspath(root)
    try:
        yield
    finally:
        _root = saved


def display_path(filename: str) -> str:
    """The path relative to the folder run from where possible, as a user would type it."""
    return _display_path(filename, display_root())


@lru_cache(maxsize=4096)
def _display_path(filename: str, cwd: str) -> str:
    # Cached: an eager step's trace asks once per op (os.path.relpath is slow).
    try:
        relative = os.path.relpath(filename, cwd)
    except ValueError:
        return filename
    return filename if relative.startswith(".." + os.sep) else relative


def user_line(
    frame: FrameType | None = None, is_user: Callable[[str], bool] | None = None
) -> SourceLine | None:
    """The innermost user frame of the current stack (or of `frame` and its callers).

    Args:
        frame: where to start; None: the caller's frame.
        is_user: the adapter's source-frame filter; None: `is_user_file`.
    """
    frame = frame if frame is not None else sys._getframe(1)
    is_user = is_user or is_user_file
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user(filename):
            lineno = frame.f_lineno
            raw = linecache.getline(filename, lineno)
            code = raw.strip()
            span = _expression_span(frame, lineno, len(raw) - len(raw.lstrip()), len(code))
            return SourceLine(display_path(filename), lineno, code, *span)
        frame = frame.f_back
    return None


def _expression_span(
    frame: FrameType, lineno: int, indent: int, length: int
) -> tuple[int | None, int | None]:
    """Where on its line the frame's current expression is, as offsets into the stripped
    line: the call or operator that is running (Python 3.11+ records instruction positions).

    (None, None) when the positions are unknown or the expression spans several lines.
    """
    positions = _positions(frame.f_code)
    index = frame.f_lasti // 2
    if positions is None or not 0 <= index < len(positions):
        return None, None
    start_line, end_line, start, end = positions[index]
    if start_line != lineno or end_line != lineno or start is None or end is None:
        return None, None
    start, end = start - indent, end - indent
    if not 0 <= start < end <= length:
        return None, None
    return start, end


@lru_cache(maxsize=256)
def _positions(code) -> tuple | None:
    # Cached per code object: walking them to an instruction costs as much as the
    # code is long, and an eager step's trace asks once per op.
    positions = getattr(code, "co_positions", None)
    return None if positions is None else tuple(positions())


def user_frame(frame: FrameType | None = None) -> FrameType | None:
    """The innermost user frame object, for callers that need its locals."""
    frame = frame if frame is not None else sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


def statement_line(frame: FrameType | None) -> SourceLine | None:
    """The frame's running call as a `SourceLine`: its first line, its last line when it
    spans several, and on one line its columns (of two layers built on one line, this)."""
    if frame is None:
        return None
    filename = frame.f_code.co_filename
    start, end, columns = frame.f_lineno, frame.f_lineno, (None, None)
    positions = getattr(frame.f_code, "co_positions", None)
    if positions is not None and frame.f_lasti >= 0:
        found = next(itertools.islice(positions(), frame.f_lasti // 2, None), None)
        if found is not None and None not in found:
            start, end, columns = found[0], found[1], (found[2], found[3])
    return source_line(filename, start, end, *columns)


def source_line(
    filename: str, start: int, end: int, column: int | None, end_column: int | None
) -> SourceLine:
    """A `SourceLine` for lines `start`-`end` of a file; columns (offsets into the
    stripped first line) only for an expression on one line."""
    raw = linecache.getline(filename, start)
    code = raw.strip()
    indent = len(raw) - len(raw.lstrip())
    if end != start or column is None or end_column is None:
        column = end_column = None
    else:
        column, end_column = column - indent, end_column - indent
        if not 0 <= column < end_column <= len(code):
            column = end_column = None
    return SourceLine(
        display_path(filename),
        start,
        code,
        column=column,
        end_column=end_column,
        end_line=end if end != start else None,
    )
