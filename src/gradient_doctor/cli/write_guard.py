"""In a rerun's process: an audit hook that stops the user's script writing the user's own files.

A rerun (a confirmation of a fix, the seeded rerun of a PyTorch step) runs the script in
a scratch copy of the folder (`scratch_copy`), where whatever it writes lands in the
copy. Two ways lead out of the copy: the links it holds to large files and to what the
user's own links point at (opened for writing, a link writes the user's file: a
`np.save` over a linked 1 GB array truncates the original), and absolute paths into the
user's folder (an argument, a path written into the script). `install` adds a
`sys.addaudithook` hook, before the script runs, that refuses each of them with
`RerunWriteRefused` (a `PermissionError`) and notes the refusal in the guard's log, which
the doctor reads after the rerun: a rerun that was stopped judges nothing, and says so.

What the hook sees: Python's own file operations (`open`, `io.open`, `os.open`, and so
NumPy's, pickle's, Keras 3's `.keras` archive, the csv logger's), truncation, renames,
removals and new links or folders. What it cannot see: files opened by C/C++ code, which
raises no audit event: `torch.save` to a path (PyTorch's C++ zip writer), TensorFlow's
own file system (checkpoints, SavedModel, summaries, TFRecord writers), HDF5 (h5py),
safetensors, Arrow; nor programs the script starts (a `cp` in a shell; a process started
by `spawn` rather than forked has no hook). `scratch_copy` therefore copies, never
links, files with checkpoint suffixes, and after each rerun compares every linked file's
size and modification time with what they were, to say loudly when one changed anyway.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass

# The audit events that write, create or remove a path, and which of their arguments
# are such paths; `open` is judged by its mode and flags, the others always write.
_PATH_ARGUMENTS = {
    "open": (0,),
    "os.truncate": (0,),
    "os.rename": (0, 1),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "shutil.rmtree": (0,),
    "os.mkdir": (0,),
    "os.link": (1,),
    "os.symlink": (1,),
}
# Events whose path is the entry itself, never the file a link there points to.
_NOT_FOLLOWED = frozenset(_PATH_ARGUMENTS) - {"open", "os.truncate"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC | os.O_CREAT
# Every scratch folder the doctor makes starts so (a rerun inside a rerun writes there).
SCRATCH_PREFIX = "gradient-doctor-"

LINKED_REFUSAL = (
    "the rerun of your script tried to write {path}, a large file of your folder that the "
    "scratch copy links to instead of copying; it was stopped so your file stays as it was. "
    "A rerun writing it would change your own file: to let a rerun run through, write it "
    "under a new name, or write a new file and `os.replace` it over this one (a rerun then "
    "replaces its link, not your file)"
)
FOLDER_REFUSAL = (
    "the rerun of your script tried to write {path}, in your own folder, by a path that "
    "leads out of the scratch copy the rerun runs in; it was stopped so your files stay as "
    "they were. Write to paths relative to the working folder (or to the script's "
    "`__file__`), which a rerun finds in its copy"
)


class RerunWriteRefused(PermissionError):
    """A rerun of the user's script tried to write one of the user's own files."""


@dataclass(frozen=True)
class WriteGuard:
    """What a rerun's process may not write, and where it notes what it refused.

    Attributes:
        folders: the user's folders the scratch copy was made of (real paths).
        linked: the files outside the copy that its links point to (real paths).
        linked_folders: the folders outside the copy that its links point to.
        log: the file each refusal is noted in, one line each.
    """

    folders: tuple[str, ...]
    linked: tuple[str, ...]
    linked_folders: tuple[str, ...]
    log: str

    def save(self, path: str) -> str:
        """Write the guard as JSON to `path` (for a rerun in another interpreter); `path`."""
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(asdict(self), handle)
        return path

    @classmethod
    def load(cls, path: str) -> WriteGuard:
        with open(path, encoding="utf-8") as handle:
            fields = json.load(handle)
        return cls(**{name: tuple(v) if isinstance(v, list) else v for name, v in fields.items()})

    def refusal(self, path: str) -> str | None:
        """Why writing the real path `path` is refused, or None when it may be written (the
        doctor's scratch folders, where the copy lies, are let through before this)."""
        if path in self.linked or _under(path, self.linked_folders):
            return LINKED_REFUSAL.format(path=path)
        if _under(path, self.folders) and "__pycache__" not in path.split(os.sep):
            return FOLDER_REFUSAL.format(path=path)
        return None

    def refused(self) -> str | None:
        """The first refusal noted in the log, or None when nothing was refused."""
        try:
            with open(self.log, encoding="utf-8") as handle:
                first = handle.readline().strip()
        except OSError:
            return None
        return first or None


def install(guard: WriteGuard) -> None:
    """Refuse, from now on in this process, every write `guard` forbids.

    An audit hook stays for the process's life (and its forks'): call it only in a
    process that exists to run the rerun.
    """
    log = os.open(guard.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    temp = os.path.realpath(tempfile.gettempdir())  # found now: the first call writes a file

    def hook(event: str, args: tuple) -> None:
        places = _PATH_ARGUMENTS.get(event)
        if places is None or (event == "open" and not _writes(args)):
            return
        for place in places:
            real = _real_path(args[place], entry=event in _NOT_FOLLOWED)
            if real is None or in_scratch(real, temp):
                continue
            if event == "os.mkdir" and os.path.isdir(real):  # fails anyway (makedirs)
                continue
            why = guard.refusal(real)
            if why is not None:
                os.write(log, why.encode("utf-8", "replace") + b"\n")
                raise RerunWriteRefused(errno.EACCES, why, real)

    sys.addaudithook(hook)


def _writes(args: tuple) -> bool:
    """Whether an `open` event's mode or flags open for writing."""
    _, mode, flags = args
    if isinstance(flags, int) and flags & _WRITE_FLAGS:
        return True
    return isinstance(mode, str) and any(letter in mode for letter in "wax+")


def _real_path(path, entry: bool) -> str | None:
    """The real path an event names (`entry`: of the entry itself, not what a link there
    points to); None for a file descriptor, opened earlier."""
    if path is None or isinstance(path, int):
        return None
    name = os.path.abspath(os.fsdecode(os.fspath(path)))
    if entry:
        return os.path.join(os.path.realpath(os.path.dirname(name)), os.path.basename(name))
    return os.path.realpath(name)


def _under(path: str, folders: tuple[str, ...]) -> bool:
    return any(
        path == folder or path.startswith(folder.rstrip(os.sep) + os.sep) for folder in folders
    )


def in_scratch(path: str, temp: str | None = None) -> bool:
    """Whether the real path `path` lies in one of the doctor's scratch folders, in the
    temp folder `temp` (the system's unless told)."""
    temp = temp or os.path.realpath(tempfile.gettempdir())
    return path.startswith(os.path.join(temp, SCRATCH_PREFIX))


def main(argv: list[str]) -> int:
    """`python -m gradient_doctor.cli.write_guard GUARD.json ARGS...`: the doctor's command
    (`gradient-doctor ARGS...`) with the guard saved in GUARD.json installed first."""
    install(WriteGuard.load(argv[0]))
    from gradient_doctor.cli.main import main as doctor

    return doctor(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
