"""A scratch copy of the user's folder for a rerun of their script: small files copied, big linked.

Every rerun of the user's script (the confirmation of a fix in `patched_rerun`, the
seeded rerun of a PyTorch step in `torch_adapter.rerun.step_rerun`) runs in such a copy, so
what the script writes (a log it appends to, checkpoints, events files) lands in the
copy and never a second time in the user's folder. Tools' caches and environments are
left out; files over `LINK_ABOVE_BYTES` (data) are linked instead of copied, and so are
the folders and files the user's own links point to outside the folder. A link opened
for writing writes the user's file, so each rerun's process runs under the copy's
`WriteGuard` (`write_guard`), which refuses that from Python. Writers in C/C++ (PyTorch's
`torch.save`, TensorFlow's file system, HDF5) go past the guard: large files with a
checkpoint suffix, what they write, are copied rather than linked (while the disk holds
them), and `changed_links` says, after the rerun, when a linked file changed anyway.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from gradient_doctor.cli.write_guard import WriteGuard, in_scratch

# Folders never copied into the scratch folder: tools' caches and environments.
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "env",
        "__pycache__",
        ".pytest_cache",
        ".ruff_cache",
        ".mypy_cache",
        "node_modules",
        ".ipynb_checkpoints",
    }
)
# Files larger than this are linked into the scratch folder instead of copied (data).
LINK_ABOVE_BYTES = 32 * 2**20
# What frameworks write from C/C++, past the write guard (PyTorch, TensorFlow, HDF5,
# safetensors checkpoints): copied whatever their size, so a rerun that overwrites one
# overwrites its copy.
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".h5", ".hdf5", ".keras", ".safetensors", ".index")
# A TensorFlow checkpoint's shards: `model.ckpt.data-00000-of-00001`.
CHECKPOINT_SHARD = ".data-"
# A big checkpoint is linked after all when copying it would leave less free disk.
FREE_DISK_KEPT_BYTES = 2 * 2**30

CHANGED_LINK = (
    "WARNING: your file {path} changed while the rerun of your script ran ({how}). The "
    "scratch copy links to it instead of copying it (it is over {limit} MiB), and a writer "
    "the doctor cannot stop, a framework's own file code in C/C++ (`torch.save`, "
    "TensorFlow's file system, HDF5), wrote it through the link. Restore it from a copy if "
    "you keep one; the rerun judges nothing. Save what your script overwrites under a "
    "checkpoint suffix ({suffixes}), which a rerun's copy copies rather than links, or "
    "under a new name"
)


@dataclass(frozen=True)
class ScratchCopy:
    """A copy of the user's folder, made for one rerun.

    Attributes:
        source: the user's folder (its real path).
        root: the copy.
        linked: each file outside the copy that a link in it points to (its real path),
            with its size and modification time (ns) when the copy was made.
        linked_folders: the folders outside the copy that links in it point to.
    """

    source: str
    root: str
    linked: dict[str, tuple[int, int]]
    linked_folders: tuple[str, ...]

    def guard(self, log: str, also: tuple[str, ...] = ()) -> WriteGuard:
        """The write guard of a rerun in this copy, noting its refusals in `log`; `also`
        are more folders of the user's it keeps from being written (a script's own
        folder outside the copied one, whose files the rerun reads in place)."""
        folders = (self.source, *(os.path.realpath(folder) for folder in also))
        return WriteGuard(folders, tuple(self.linked), self.linked_folders, log)

    def mapped(self, path: str) -> str:
        """`path` (absolute, or relative to the user's folder) as a rerun in the copy names
        it: a path into the folder leads to the copy's entry where the copy holds one (a
        relative one stays as it is: the rerun runs in the copy), any other is absolute."""
        full = os.path.join(self.source, path)
        relative = os.path.relpath(os.path.realpath(full), self.source)
        inside = os.path.normpath(os.path.join(self.root, relative))
        if relative.split(os.sep)[0] == os.pardir or not os.path.lexists(inside):
            return os.path.normpath(full)
        return inside if os.path.isabs(path) else path

    def changed_links(self) -> str | None:
        """Say, when a linked file's size or modification time is not what it was when
        the copy was made, that it changed (None when every one is as it was)."""
        for path, (size, modified) in self.linked.items():
            try:
                now = os.stat(path)
            except OSError:
                how = "it is gone"
            else:
                if (now.st_size, now.st_mtime_ns) == (size, modified):
                    continue
                how = f"{size} bytes before, {now.st_size} after, modified again"
            return CHANGED_LINK.format(
                path=path,
                how=how,
                limit=LINK_ABOVE_BYTES // 2**20,
                suffixes=", ".join((*CHECKPOINT_SUFFIXES, CHECKPOINT_SHARD + "*")),
            )
        return None

    def trespass(self, guard: WriteGuard) -> str | None:
        """What a rerun under `guard` did to the user's files, or None when nothing: the
        write the guard stopped, else a linked file that changed."""
        return guard.refused() or self.changed_links()


def folder_listing(source: str) -> frozenset[str]:
    """The relative paths of the files, links and folders a copy of `source` would take.

    Read before the script first runs, it lets a later rerun's copy leave out what the
    run made (a checkpoint it resumes from when present), so the rerun sees the folder
    as the run started from it (files the run changed are copied as they are now).
    """
    return frozenset(relative for relative, _ in _entries(os.path.realpath(source), ""))


def copy_folder(source: str, target: str, listing: frozenset[str] | None = None) -> ScratchCopy:
    """Copy the folder `source` to `target` (which must not exist) for a rerun.

    Caches and environments (`SKIPPED_DIRS`) and the doctor's scratch folders are left
    out, and with `listing` (`folder_listing`) whatever it does not hold. Large files
    are linked (checkpoints copied while the disk holds them); a link in the folder to
    something inside it points to the copy's, one to something outside is kept.
    """
    source = os.path.realpath(source)
    target = os.path.abspath(target)
    linked: dict[str, tuple[int, int]] = {}
    folders: list[str] = []
    os.makedirs(target)
    for relative, entry in _entries(source, target):
        if listing is not None and relative not in listing:
            continue
        path, into = os.path.join(source, relative), os.path.join(target, relative)
        if entry.is_symlink():
            _relink(path, into, source, target, linked, folders)
        elif entry.is_dir(follow_symlinks=False):
            os.mkdir(into)
        elif not entry.is_file(follow_symlinks=False):  # a socket, a pipe: nothing to copy
            continue
        elif _linked_big(entry, target):
            os.symlink(path, into)
            linked[path] = _stamp(path)
        else:
            shutil.copy2(path, into)
    return ScratchCopy(source, target, linked, tuple(folders))


def _entries(source: str, target: str):
    """`(relative path, DirEntry)` of what a copy of `source` takes, each folder before
    what it holds (links to folders are not followed)."""
    pending = [""]
    while pending:
        folder = pending.pop()
        with os.scandir(os.path.join(source, folder)) as scan:
            for entry in sorted(scan, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False) and _skipped(entry, target):
                    continue
                relative = os.path.join(folder, entry.name)
                yield relative, entry
                if entry.is_dir(follow_symlinks=False):
                    pending.append(relative)


def _skipped(entry: os.DirEntry, target: str) -> bool:
    """A folder a copy leaves out: a cache or environment, the copy itself, a scratch."""
    path = os.path.realpath(entry.path)
    # A scratch folder of the doctor's itself, not any folder inside one: a copy made of
    # a copy (`fix`'s patched copy, rerun to record its failing step) keeps its `data/`.
    scratch = in_scratch(path) and not in_scratch(os.path.dirname(path))
    return entry.name in SKIPPED_DIRS or scratch or (bool(target) and path == target)


def _linked_big(entry: os.DirEntry, target: str) -> bool:
    """Whether a regular file is linked rather than copied: over the size, and no
    checkpoint, or a checkpoint the disk has no room for."""
    size = entry.stat(follow_symlinks=False).st_size
    if size <= LINK_ABOVE_BYTES:
        return False
    name = entry.name.lower()
    if not (name.endswith(CHECKPOINT_SUFFIXES) or CHECKPOINT_SHARD in name):
        return True
    return shutil.disk_usage(target).free < size + FREE_DISK_KEPT_BYTES


def _relink(path: str, into: str, source: str, target: str, linked: dict, folders: list) -> None:
    """Make the copy's link `into` for the user's link `path`: to the copy's own entry
    when it points inside the folder, else to what it points to (noted as linked)."""
    real = os.path.realpath(path)
    inside = os.path.relpath(real, source)
    parts = inside.split(os.sep)
    if parts[0] != os.pardir and not SKIPPED_DIRS.intersection(parts):
        mirrored = os.path.join(target, inside)
        os.symlink(os.path.relpath(mirrored, os.path.dirname(into)), into)
        return
    os.symlink(real if os.path.exists(real) else os.readlink(path), into)
    if os.path.isdir(real):
        folders.append(real)
    elif os.path.exists(real):
        linked[real] = _stamp(real)


def _stamp(path: str) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_size, status.st_mtime_ns
