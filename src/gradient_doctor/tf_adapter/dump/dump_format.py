"""The crash dump on disk: its files, format version, checksums, and safe writing and reading.

A dump is a folder of safe formats only: JSON, NumPy `.npz` (written from plain
numeric arrays and read with `allow_pickle=False`) and a binary TensorFlow
`GraphDef` (protobuf). `manifest.json` names every other file with what it holds,
its size and its SHA-256, so a missing, truncated or edited file is caught before
anything is read from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gradient_doctor.errors import UsageError

FORMAT = "gradient-doctor/dump"
VERSION = 1

MANIFEST = "manifest.json"
GRAPH = "step.pb"
STEP = "step.json"
VARIABLES = "variables.npz"
BATCH = "batch.npz"

HOLDS = {
    GRAPH: "the failing step as a binary TensorFlow GraphDef, its function library "
    "included; optimizer updates are left out, as in the run's own replay",
    STEP: "for every op of step.pb: its Keras layer, the user's source line, forward or "
    "backward pass and, for a gradient op, the forward op it differentiates; which "
    "placeholders are the batch, the variables and the constants (with their npz keys); "
    "the step's gradients and losses",
    VARIABLES: "the last good value of every variable the step reads or writes (weights, "
    "BatchNorm statistics, seed-generator state, metric totals) and of its optimizers' "
    "variables (slots, iteration counter, learning rate)",
    BATCH: "the failing batch, and any outside tensors the step closes over",
}
# NumPy has no bfloat16 or float8: such arrays are stored as unsigned integers of the
# same width and viewed back by the dtype name recorded beside them.
_STORED_AS = {1: np.uint8, 2: np.uint16}


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


def encode_array(array: np.ndarray) -> tuple[np.ndarray, str]:
    """The array as NumPy can store it without pickling, and its dtype's name."""
    array = np.asarray(array)
    if array.dtype.hasobject:
        raise DumpError(f"cannot store an array of Python objects (dtype {array.dtype}).")
    name = array.dtype.name
    if array.dtype.kind == "V" or type(array.dtype).__module__.startswith("ml_dtypes"):
        return array.view(_STORED_AS[array.dtype.itemsize]), name
    return array, name


def decode_array(array: np.ndarray, dtype: str) -> np.ndarray:
    """Undo `encode_array`: view the stored integers as `dtype` where it is not NumPy's own."""
    if array.dtype.name == dtype:
        return array
    import tensorflow as tf  # knows bfloat16 and the float8 types

    return array.view(tf.as_dtype(dtype).as_numpy_dtype)


def write_dump(
    directory: str | os.PathLike[str],
    manifest: dict[str, Any],
    graph: bytes,
    step: dict[str, Any],
    variables: dict[str, np.ndarray],
    batch: dict[str, np.ndarray],
) -> Path:
    """Write a complete dump into `directory`, which must not exist or be empty.

    The files go to a hidden folder beside it first, which then takes its name, so
    no reader ever sees half a dump and no file of the user's is replaced.

    Args:
        directory: the dump folder.
        manifest: the manifest's own fields (format, versions, finding...).
        graph: the serialised `GraphDef`.
        step: the JSON-safe description of the graph.
        variables: npz key -> value for `variables.npz`.
        batch: npz key -> value for `batch.npz`.

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
        (staging / GRAPH).write_bytes(graph)
        _write_json(staging / STEP, step)
        np.savez(staging / VARIABLES, **variables)
        np.savez(staging / BATCH, **batch)
        files = {
            name: {"holds": HOLDS[name], **_fingerprint(staging / name)}
            for name in (GRAPH, STEP, VARIABLES, BATCH)
        }
        _write_json(staging / MANIFEST, {**manifest, "files": files})
        if target.is_dir():
            target.rmdir()  # empty, as checked: the staged folder takes its place
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # only the doctor's own staging folder
        raise
    return target


@dataclass(frozen=True)
class DumpFiles:
    """A dump read back and checked: the manifest and each file's contents."""

    directory: Path
    manifest: dict[str, Any]
    graph: bytes
    step: dict[str, Any]
    variables: dict[str, np.ndarray]
    batch: dict[str, np.ndarray]


def read_dump(directory: str | os.PathLike[str]) -> DumpFiles:
    """Read a dump, refusing anything that is not exactly what the doctor wrote.

    Files are only opened for reading; nothing in the folder changes.

    Raises:
        DumpError: the folder or a file is missing, the manifest is not this
            format or version, or a file does not match its recorded size and
            checksum (truncated or corrupted).
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise DumpError(
            f"cannot replay {str(directory)!r}: no such folder. Pass the folder that "
            "`gradient-doctor run --dump DIR` wrote."
        )
    manifest = _read_manifest(folder)
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise DumpError(_corrupted(folder, MANIFEST, "it lists no files"))
    for name in (GRAPH, STEP, VARIABLES, BATCH):
        _check_file(folder, name, files.get(name))
    step = _load_json(folder, STEP)
    return DumpFiles(
        directory=folder,
        manifest=manifest,
        graph=(folder / GRAPH).read_bytes(),
        step=step,
        variables=_load_npz(folder, VARIABLES),
        batch=_load_npz(folder, BATCH),
    )


def _read_manifest(folder: Path) -> dict[str, Any]:
    if not (folder / MANIFEST).is_file():
        raise DumpError(
            f"cannot replay {str(folder)!r}: it has no {MANIFEST}, so it is not a crash dump "
            "(or an incomplete copy of one). Pass the folder `gradient-doctor run --dump DIR` "
            "wrote, with all its files."
        )
    manifest = _load_json(folder, MANIFEST)
    if manifest.get("format") != FORMAT:
        raise DumpError(_corrupted(folder, MANIFEST, f"its format is not {FORMAT!r}"))
    version = manifest.get("version")
    if version != VERSION:
        made_by = (manifest.get("versions") or {}).get("gradient_doctor", "an unknown version")
        raise DumpError(
            f"cannot replay {str(folder)!r}: it is a version {version!r} dump (written by "
            f"gradient-doctor {made_by}), and this gradient-doctor reads version {VERSION} "
            "only. Replay it with the gradient-doctor that wrote it, or dump the run again."
        )
    return manifest


def _check_file(folder: Path, name: str, recorded) -> None:
    path = folder / name
    if not path.is_file():
        raise DumpError(
            f"cannot replay {str(folder)!r}: {name} is missing. Copy the whole dump folder, "
            "every file the manifest lists."
        )
    if not isinstance(recorded, dict) or "sha256" not in recorded or "bytes" not in recorded:
        raise DumpError(_corrupted(folder, MANIFEST, f"it has no checksum for {name}"))
    found = _fingerprint(path)
    if found["bytes"] != recorded["bytes"]:
        raise DumpError(
            _corrupted(
                folder,
                name,
                f"it has {found['bytes']} bytes where {recorded['bytes']} were written "
                "(truncated or changed)",
            )
        )
    if found["sha256"] != recorded["sha256"]:
        raise DumpError(_corrupted(folder, name, "its contents do not match their checksum"))


def _corrupted(folder: Path, name: str, why: str) -> str:
    return (
        f"cannot replay {str(folder)!r}: {name} is corrupted: {why}. Copy the dump again "
        "from where it was written, or dump the run again."
    )


def _fingerprint(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def _write_json(path: Path, value: dict[str, Any]) -> None:
    path.write_text(json.dumps(value, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def _load_json(folder: Path, name: str) -> dict[str, Any]:
    try:
        value = json.loads((folder / name).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DumpError(_corrupted(folder, name, f"it is not valid JSON ({error})")) from None
    if not isinstance(value, dict):
        raise DumpError(_corrupted(folder, name, "it is not a JSON object"))
    return value


def _load_npz(folder: Path, name: str) -> dict[str, np.ndarray]:
    try:
        with np.load(folder / name, allow_pickle=False) as arrays:
            return {key: arrays[key] for key in arrays.files}
    except Exception as error:  # zipfile, format and pickle refusals all mean a bad file
        raise DumpError(
            _corrupted(folder, name, f"NumPy cannot read it ({type(error).__name__}: {error})")
        ) from None
