"""A PyTorch crash dump's own files: the recorded ops as JSON, the leaves as safetensors.

`ops.json` holds every recorded aten op (its overload, its arguments with tensors as
value ids, its outputs' ids, its place), the leaves' layouts, the ids of the update's
losses and gradients, and what was left out; `leaves.safetensors` the leaves' values
and the CPU generator's state when the step began. Both are safe formats: JSON, and
safetensors' raw tensor bytes under a JSON header. Nothing is pickled. The folder
around them (manifest, checksums) is `core.dump_folder`'s.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from gradient_doctor.core.dump_folder import DumpError, corrupted, load_json, write_json
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.torch_adapter.dump.step_tape import (
    GeneratorState,
    Leaf,
    TapedOp,
    TapedRecorder,
)
from gradient_doctor.torch_adapter.localize.op_recorder import OpPlace

OPS = "ops.json"
LEAVES = "leaves.safetensors"
HOLDS = {
    OPS: "every aten op of the failing step, forward and backward, in the order it ran: its "
    "overload, its arguments (each tensor as the id of its value), the ids of its outputs, "
    "its module, source line, phase and the forward op a backward op differentiates; each "
    "leaf's id, parameter name, dtype, shape, stride and device; the ids of the failing "
    "update's losses and gradients; what was left out",
    LEAVES: "the value of every leaf (a tensor the step read before any recorded op wrote "
    "it: parameters, the batch, constants made before the step) as the step began, the "
    "CPU random generator's state then, and before each random op its generator's state",
}
RNG_KEY = "rng.torch_cpu"
# Before the random op at index N of `ops`, its generator's state: `rng.op_N.cpu`,
# `rng.op_N.cuda:0`.
_DRAW_PREFIX = "rng.op_"
# In place of the tape, when the rerun could not write it: why.
TAPE_ERROR = "tape_error.txt"


@dataclass(frozen=True)
class Tape:
    """A dump's recorded step, read back.

    Attributes:
        ops: the recorded ops, in order.
        leaves: the leaves, each with its value unless left out.
        checks: the ids of the failing update's losses and gradients.
        rng: the CPU generator's state as the step began.
        draws: index in `ops` of each random op -> its generator's state before it
            drew (empty in a dump written before draws were kept).
    """

    ops: tuple[TapedOp, ...]
    leaves: tuple[Leaf, ...]
    checks: tuple[int, ...]
    rng: torch.Tensor
    draws: Mapping[int, GeneratorState] = dataclasses.field(default_factory=dict)


def write_tape(folder: str | os.PathLike[str], recorder: TapedRecorder) -> None:
    """Write what `recorder` kept into `folder` (made if missing): `ops.json` and
    `leaves.safetensors`."""
    from safetensors.torch import save_file  # only a dump needs it

    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    leaves = recorder.named_leaves()
    tensors = {
        _key(leaf): leaf.value.detach().to("cpu").contiguous()
        for leaf in leaves
        if leaf.value is not None
    }
    tensors[RNG_KEY] = recorder.rng.contiguous()
    for index, draw in recorder.draws.items():
        tensors[f"{_DRAW_PREFIX}{index}.{draw.device}"] = draw.state.contiguous()
    save_file(tensors, target / LEAVES)
    write_json(
        target / OPS,
        {
            "ops": [_op_data(op) for op in recorder.ops],
            "leaves": [_leaf_data(leaf) for leaf in leaves],
            "checks": list(recorder.checks),
            "left_out": left_out(recorder),
        },
    )


def left_out(recorder: TapedRecorder) -> dict:
    """What the dump does not hold, in the manifest's words (empty lists: nothing)."""
    return {
        "limit_bytes": recorder.limit_bytes,
        "kept_bytes": recorder.kept_bytes,
        "leaves": [
            {
                "id": leaf.id,
                "name": leaf.name,
                "dtype": leaf.dtype,
                "shape": list(leaf.shape),
                "why": leaf.why,
            }
            for leaf in recorder.named_leaves()
            if leaf.value is None
        ],  # fmt: skip
        "ops": [
            {"index": index, "op": op.op, "why": op.refused}
            for index, op in enumerate(recorder.ops)
            if op.refused is not None
        ],
        "checks": recorder.checks_left_out,
    }


def tape_problem(folder: str | os.PathLike[str]) -> str | None:
    """Why the rerun wrote no tape into `folder`, or None when it wrote one."""
    target = Path(folder)
    if (target / OPS).is_file() and (target / LEAVES).is_file():
        return None
    if (target / TAPE_ERROR).is_file():
        return f"the rerun could not save the step ({(target / TAPE_ERROR).read_text().strip()})"
    return "the rerun saved no tape of the step"


def read_left_out(folder: str | os.PathLike[str]) -> dict:
    """The `left_out` that `write_tape` wrote into `folder`."""
    return load_json(Path(folder), OPS).get("left_out") or {}


def read_tape(folder: Path) -> Tape:
    """The tape of a dump folder whose files were checked against its manifest.

    Raises:
        DumpError: a file cannot be read as written.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    data = load_json(folder, OPS)
    try:
        tensors = load_file(folder / LEAVES)
    except (SafetensorError, OSError, ValueError) as error:
        raise DumpError(
            corrupted(folder, LEAVES, f"safetensors cannot read it ({error})")
        ) from None
    try:
        leaves = tuple(_leaf(entry, tensors) for entry in data["leaves"])
        ops = tuple(_op(entry) for entry in data["ops"])
        checks = tuple(int(i) for i in data["checks"])
        return Tape(ops, leaves, checks, tensors[RNG_KEY], _draws(tensors))
    except (KeyError, TypeError, ValueError) as error:
        raise DumpError(corrupted(folder, OPS, f"it lacks {error}")) from None


def _draws(tensors: Mapping[str, torch.Tensor]) -> dict[int, GeneratorState]:
    """The generator states kept before the random ops, by op index."""
    draws = {}
    for key, state in tensors.items():
        if key.startswith(_DRAW_PREFIX):
            index, _, device = key.removeprefix(_DRAW_PREFIX).partition(".")
            draws[int(index)] = GeneratorState(device, state)
    return draws


def _key(leaf: Leaf) -> str:
    return f"leaf_{leaf.id}"


def _op_data(op: TapedOp) -> dict:
    place = op.place
    return {
        "op": op.op,
        "args": op.args,
        "kwargs": op.kwargs,
        "outputs": list(op.outputs),
        "event": op.event,
        "place": {
            "layer": place.layer,
            "where": place.where,
            "phase": place.phase,
            "forward": place.forward_index,
            "gradient_of": place.gradient_of,
            "source": None if place.source is None else dataclasses.asdict(place.source),
        },
        "refused": op.refused,
    }


def _op(data: dict) -> TapedOp:
    place = data["place"]
    source = place["source"]
    return TapedOp(
        op=str(data["op"]),
        args=data["args"],
        kwargs=data["kwargs"],
        outputs=tuple(int(i) for i in data["outputs"]),
        event=int(data["event"]),
        place=OpPlace(
            layer=place["layer"],
            where=place["where"],
            phase=place["phase"],
            forward_index=place["forward"],
            gradient_of=place["gradient_of"],
            source=None if source is None else SourceLine(**source),
        ),
        refused=data["refused"],
    )


def _leaf_data(leaf: Leaf) -> dict:
    return {
        "id": leaf.id,
        "key": None if leaf.value is None else _key(leaf),
        "name": leaf.name,
        "dtype": leaf.dtype,
        "shape": list(leaf.shape),
        "stride": list(leaf.stride),
        "device": leaf.device,
        "why": leaf.why,
    }


def _leaf(data: dict, tensors: dict[str, torch.Tensor]) -> Leaf:
    key = data["key"]
    value = None if key is None else tensors[key]
    return Leaf(
        id=int(data["id"]),
        name=data["name"],
        dtype=str(data["dtype"]),
        shape=tuple(int(n) for n in data["shape"]),
        stride=tuple(int(n) for n in data["stride"]),
        device=str(data["device"]),
        value=value,
        why=data["why"],
    )
