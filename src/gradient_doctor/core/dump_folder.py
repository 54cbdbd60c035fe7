"""A crash dump's folder on disk, whatever the framework: the manifest, checksums, staged writing.

Every dump is a folder whose `manifest.json` names each other file with what it holds,
its size and its SHA-256, so a missing, truncated or edited file is caught before
anything is read from it. The files appear all at once: they are written to a hidden
folder beside the target, which then takes its name. Which files a dump holds, and in
which safe format (JSON, NumPy `.npz`, safetensors, a protobuf), is the adapter's.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gradient_doctor.errors import UsageError

FORMAT = "gradient-doctor/dump"
VERSION = 1
MANIFEST = "manifest.json"
# The framework of a dump whose manifest names none (the first dumps were TensorFlow's).
DEFAULT_FRAMEWORK = "tensorflow"


class DumpError(UsageError):
    """A dump folder that cannot be written or read (the message says why and what to do)."""


def check_new_dump_directory(path: str | os.PathLike[str]) -> None:
    """Refuse a dump folder that exists and is not empty (nothing is ever overwritten).

    Raises:
        DumpError: `path` is a file, or a folder that holds anything.
    """
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise DumpError(
            f"cannot write the crash dump to {str(path)!r}: it is a file. Pass a new "
            "folder, for example `--dump crash_dump`."
        )
    if target.is_dir() and any(target.iterdir()):
        what = "an earlier crash dump" if (target / MANIFEST).exists() else "other files"
        raise DumpError(
            f"cannot write the crash dump to {str(path)!r}: the folder already holds {what}, "
            "and the doctor never overwrites files. Pass a new or empty folder."
        )


def write_dump_folder(
    directory: str | os.PathLike[str],
    manifest: dict[str, Any],
    write_files: Callable[[Path], dict[str, str]],
) -> Path:
    """Write a complete dump into `directory`, which must not exist or be empty.

    Args:
        directory: the dump folder.
        manifest: the manifest's own fields (format, versions, finding...).
        write_files: writes the dump's other files into the folder it is given and
            returns what each holds, by file name.

    Returns:
        The dump folder.

    Raises:
        DumpError: the folder holds files, or appeared while the dump was written.
        OSError: the files cannot be written.
    """
    target = Path(directory)
    check_new_dump_directory(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    staging.mkdir()
    try:
        holds = write_files(staging)
        files = {
            name: {"holds": what, **fingerprint(staging / name)} for name, what in holds.items()
        }
        write_json(staging / MANIFEST, {**manifest, "files": files})
        if target.is_dir():
            target.rmdir()  # empty, as checked: the staged folder takes its place
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # only the doctor's own staging folder
        raise
    return target


def read_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the dump in `directory`, checked to be this format and version.

    Raises:
        DumpError: no such folder, no manifest, another format or version.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise DumpError(
            f"cannot replay {str(directory)!r}: no such folder. Pass the folder that "
            "`gradient-doctor run --dump DIR` wrote."
        )
    if not (folder / MANIFEST).is_file():
        raise DumpError(
            f"cannot replay {str(folder)!r}: it has no {MANIFEST}, so it is not a crash dump "
            "(or an incomplete copy of one). Pass the folder `gradient-doctor run --dump DIR` "
            "wrote, with all its files."
        )
    manifest = load_json(folder, MANIFEST)
    if manifest.get("format") != FORMAT:
        raise DumpError(corrupted(folder, MANIFEST, f"its format is not {FORMAT!r}"))
    version = manifest.get("version")
    if version != VERSION:
        made_by = (manifest.get("versions") or {}).get("gradient_doctor", "an unknown version")
        raise DumpError(
            f"cannot replay {str(folder)!r}: it is a version {version!r} dump (written by "
            f"gradient-doctor {made_by}), and this gradient-doctor reads version {VERSION} "
            "only. Replay it with the gradient-doctor that wrote it, or dump the run again."
        )
    return manifest


def dump_framework(manifest: dict[str, Any]) -> str:
    """The framework that wrote the dump ("tensorflow" or "torch")."""
    return manifest.get("framework") or DEFAULT_FRAMEWORK


def check_files(folder: Path, manifest: dict[str, Any], names: Iterable[str]) -> None:
    """Check each of `names` against its size and checksum in the manifest.

    Raises:
        DumpError: a file is missing, unlisted, truncated or changed.
    """
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise DumpError(corrupted(folder, MANIFEST, "it lists no files"))
    for name in names:
        _check_file(folder, name, files.get(name))


def _check_file(folder: Path, name: str, recorded) -> None:
    path = folder / name
    if not path.is_file():
        raise DumpError(
            f"cannot replay {str(folder)!r}: {name} is missing. Copy the whole dump folder, "
            "every file the manifest lists."
        )
    if not isinstance(recorded, dict) or "sha256" not in recorded or "bytes" not in recorded:
        raise DumpError(corrupted(folder, MANIFEST, f"it has no checksum for {name}"))
    found = fingerprint(path)
    if found["bytes"] != recorded["bytes"]:
        raise DumpError(
            corrupted(
                folder,
                name,
                f"it has {found['bytes']} bytes where {recorded['bytes']} were written "
                "(truncated or changed)",
            )
        )
    if found["sha256"] != recorded["sha256"]:
        raise DumpError(corrupted(folder, name, "its contents do not match their checksum"))


def corrupted(folder: Path, name: str, why: str) -> str:
    """The message of a dump file that cannot be used as written."""
    return (
        f"cannot replay {str(folder)!r}: {name} is corrupted: {why}. Copy the dump again "
        "from where it was written, or dump the run again."
    )


def fingerprint(path: Path) -> dict[str, Any]:
    """A file's size in bytes and SHA-256, as the manifest records them."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def write_json(path: Path, value: dict[str, Any]) -> None:
    """Write `value` as strict JSON (no NaN or infinities)."""
    path.write_text(json.dumps(value, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def load_json(folder: Path, name: str) -> dict[str, Any]:
    """A dump's JSON file, which must hold an object.

    Raises:
        DumpError: it is not valid JSON, or not an object.
    """
    try:
        value = json.loads((folder / name).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DumpError(corrupted(folder, name, f"it is not valid JSON ({error})")) from None
    if not isinstance(value, dict):
        raise DumpError(corrupted(folder, name, "it is not a JSON object"))
    return value
