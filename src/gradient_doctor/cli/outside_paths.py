"""A rerun's arguments that name paths outside the folder its scratch copy is made of.

A rerun runs the script in a copy of the folder the user ran from, with the user's own
arguments. An argument leading out of that folder means the same place to the copy
only if it is absolute: `--data ../shared/x.npy`, read from the copy, names a file that
is not there. So a relative one is made absolute (the copy reads what the run read).
Either way the copy can then write the user's files there (`--ckpt /runs/ck.pt`,
overwritten by a patched copy's `torch.save`, which no audit hook sees: PyTorch writes
from C++). So each such file is kept before the rerun and put back, byte for byte, when
the rerun changed it; one the rerun created is removed. A file too large to keep is
watched by its size and time only, and a change to it is said, not undone.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

# Files outside the folder larger than this are not kept (a dataset): a change to one
# is said, not undone.
KEEP_LIMIT_BYTES = 256 * 2**20


@dataclass
class _Outside:
    path: str  # its real path
    existed: bool
    stamp: tuple[int, int] | None = None  # (size, mtime_ns) before the rerun
    kept: str | None = None  # where a copy of it was kept


@dataclass
class OutsidePaths:
    """The arguments for the rerun, and the files outside the folder they name, kept.

    Use as a context manager around the rerun; `notes` then says what was put back.

    Args:
        args: the user's arguments.
        folder: the folder the scratch copy is made of (the run's working folder).
        scratch: a folder of the doctor's where the kept files go.
    """

    args: list[str]
    folder: str
    scratch: str
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.folder = os.path.realpath(self.folder)
        self._outside: dict[str, _Outside] = {}
        self.rerun_args = [self._mapped(arg) for arg in self.args]

    def _mapped(self, arg: str) -> str:
        """`arg`, with a relative path leading out of the folder made absolute."""
        prefix, value = ("", arg)
        if arg.startswith("-") and "=" in arg:
            prefix, _, value = arg.partition("=")
            prefix += "="
        real = _outside_path(value, self.folder)
        if real is None:
            return arg
        self._outside.setdefault(real, _Outside(real, os.path.lexists(real)))
        return prefix + (value if os.path.isabs(value) else real)

    def __enter__(self) -> OutsidePaths:
        for number, outside in enumerate(self._outside.values()):
            if not outside.existed or not os.path.isfile(outside.path):
                continue
            outside.stamp = _stamp(outside.path)
            if outside.stamp[0] <= KEEP_LIMIT_BYTES:
                outside.kept = os.path.join(self.scratch, f"outside-{number}")
                shutil.copy2(outside.path, outside.kept)
        return self

    def __exit__(self, *exc_info) -> None:
        for outside in self._outside.values():
            path = outside.path
            if not outside.existed:
                if os.path.isfile(path):
                    os.remove(path)
                    self.notes.append(f"it created {path}, outside your folder: removed")
                continue
            if outside.stamp is None or not os.path.isfile(path) or _stamp(path) == outside.stamp:
                continue
            if outside.kept is None:
                self.notes.append(f"it changed {path}, outside your folder (too large to keep)")
                continue
            shutil.copy2(outside.kept, path + ".gradient-doctor-restore")
            os.replace(path + ".gradient-doctor-restore", path)
            self.notes.append(f"it wrote {path}, outside your folder: put back as it was")


def _outside_path(value: str, folder: str) -> str | None:
    """The real path `value` names when it looks like a path leading out of `folder` (it
    exists, or its folder does and it has a separator); else None."""
    if not value or value.startswith("-") or os.sep not in value:
        return None
    candidate = value if os.path.isabs(value) else os.path.join(folder, value)
    real = os.path.realpath(candidate)
    if real == folder or real.startswith(folder.rstrip(os.sep) + os.sep):
        return None
    if os.path.lexists(real) or os.path.isdir(os.path.dirname(real)):
        return real
    return None


def _stamp(path: str) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_size, status.st_mtime_ns
