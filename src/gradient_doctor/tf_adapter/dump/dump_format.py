"""A TensorFlow crash dump's files, and their safe writing and reading.

The dump is a folder of safe formats only: JSON, NumPy `.npz` (written from plain
numeric arrays and read with `allow_pickle=False`) and a binary TensorFlow
`GraphDef` (protobuf). The folder itself (`manifest.json` naming every other file
with what it holds, its size and its SHA-256; the staged write) is
`core.dump_folder`'s, the same for every framework.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gradient_doctor.core.dump_folder import (
    FORMAT,
    MANIFEST,
    VERSION,
    DumpError,
    check_files,
    check_new_dump_directory,
    corrupted,
    load_json,
    read_manifest,
    write_dump_folder,
    write_json,
)

__all__ = [
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "DumpError",
    "check_new_dump_directory",
    "decode_array",
    "encode_array",
    "read_dump",
    "write_dump",
]

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

    def write_files(staging: Path) -> dict[str, str]:
        (staging / GRAPH).write_bytes(graph)
        write_json(staging / STEP, step)
        np.savez(staging / VARIABLES, **variables)
        np.savez(staging / BATCH, **batch)
        return {name: HOLDS[name] for name in (GRAPH, STEP, VARIABLES, BATCH)}

    return write_dump_folder(directory, manifest, write_files)


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
    manifest = read_manifest(folder)
    check_files(folder, manifest, (GRAPH, STEP, VARIABLES, BATCH))
    return DumpFiles(
        directory=folder,
        manifest=manifest,
        graph=(folder / GRAPH).read_bytes(),
        step=load_json(folder, STEP),
        variables=_load_npz(folder, VARIABLES),
        batch=_load_npz(folder, BATCH),
    )


def _load_npz(folder: Path, name: str) -> dict[str, np.ndarray]:
    try:
        with np.load(folder / name, allow_pickle=False) as arrays:
            return {key: arrays[key] for key in arrays.files}
    except Exception as error:  # zipfile, format and pickle refusals all mean a bad file
        raise DumpError(
            corrupted(folder, name, f"NumPy cannot read it ({type(error).__name__}: {error})")
        ) from None
