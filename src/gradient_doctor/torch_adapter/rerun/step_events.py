"""A recorded step's neutral op events written to JSON and read back (the seeded rerun's answer).

The rerun child records the failing step under the op recorder and hands the parent
what the origin walk needs: the `OpEvent`s, the non-finite tensors that matter, and each
tensor value's summary; for a step whose update left parameters without a gradient,
what the path search needs besides (`CutPaths`: what autograd made of each op, the
values handed to Python, the parameters cut and the loss). Only numbers and strings cross
the process boundary, as JSON (never a pickle of anything the user's code made). NaN and
infinities among the quoted values are written as Python's `json` writes them (`NaN`,
`Infinity`) and read back so.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from gradient_doctor.core.findings import SourceLine, TensorStats
from gradient_doctor.core.op_trace import OpEvent


@dataclass(frozen=True)
class CutPaths:
    """What a `PathRecorder` noted of a step whose update left parameters without a
    gradient, beyond its events (`gradient_paths.RecordedPaths` with them).

    Attributes:
        grad_enabled: event index -> gradients were on while it ran.
        carries: event index -> whether each output carries autograd history.
        exits: `(ops recorded before it, method, id of the tensor read, line)` of each
            `.tolist()` or `.numpy()` call.
        parameters: the names of the update's parameters left without a gradient.
        loss_ids: the ids of the tensors `backward()` was called on before the update.
        off_at: event index -> for an op gradients were off for, the user's line inside
            the `with torch.no_grad():` block that ran it.
    """

    grad_enabled: dict[int, bool]
    carries: dict[int, tuple[bool, ...]]
    exits: tuple[tuple[int, str, int, SourceLine | None], ...]
    parameters: tuple[str, ...]
    loss_ids: tuple[int, ...]
    off_at: dict[int, SourceLine] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class RecordedStep:
    """What the rerun recorded of the failing step.

    Attributes:
        reached: the rerun came to the failing update (False: the script ended,
            crashed or failed earlier; nothing was recorded).
        events: the ops from the end of the previous step to the failing update.
        bad_ids: the non-finite tensors among the update's loss and gradients.
        stats: each tensor value's summary, by id.
        why: what happened, in words, when the failing update was not reached.
        paths: for a step recorded for its parameters without a gradient, what the
            path search needs besides the events (None otherwise).
        tape: the folder holding the step's tape for `--dump` (`torch_adapter.dump`),
            set by the parent after the rerun; None when none was asked or written.
    """

    reached: bool
    events: tuple[OpEvent, ...] = ()
    bad_ids: tuple[int, ...] = ()
    stats: dict[int, TensorStats] = dataclasses.field(default_factory=dict)
    why: str = ""
    paths: CutPaths | None = None
    tape: str | None = None


def write(path: str, step: RecordedStep) -> None:
    """Write `step` to `path` as JSON."""
    data = {
        "reached": step.reached,
        "events": [dataclasses.asdict(event) for event in step.events],
        "bad_ids": list(step.bad_ids),
        "stats": {str(key): dataclasses.asdict(value) for key, value in step.stats.items()},
        "why": step.why,
        "paths": None if step.paths is None else _paths_data(step.paths),
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle)


def read(path: str) -> RecordedStep:
    """The `RecordedStep` that `write` wrote to `path`."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    return RecordedStep(
        reached=bool(data["reached"]),
        events=tuple(_event(event) for event in data["events"]),
        bad_ids=tuple(data["bad_ids"]),
        stats={int(key): _stats(value) for key, value in data["stats"].items()},
        why=data["why"],
        paths=_paths(data["paths"]) if data.get("paths") is not None else None,
    )


def _paths_data(paths: CutPaths) -> dict:
    return {
        "grad_enabled": {str(key): value for key, value in paths.grad_enabled.items()},
        "carries": {str(key): list(value) for key, value in paths.carries.items()},
        "exits": [
            [before, method, key, None if line is None else dataclasses.asdict(line)]
            for before, method, key, line in paths.exits
        ],
        "parameters": list(paths.parameters),
        "loss_ids": list(paths.loss_ids),
        "off_at": {str(key): dataclasses.asdict(line) for key, line in paths.off_at.items()},
    }


def _paths(data: dict) -> CutPaths:
    return CutPaths(
        grad_enabled={int(key): bool(value) for key, value in data["grad_enabled"].items()},
        carries={int(key): tuple(value) for key, value in data["carries"].items()},
        exits=tuple(
            (before, method, key, None if line is None else SourceLine(**line))
            for before, method, key, line in data["exits"]
        ),
        parameters=tuple(data["parameters"]),
        loss_ids=tuple(data["loss_ids"]),
        off_at={int(key): SourceLine(**line) for key, line in data.get("off_at", {}).items()},
    )


def _event(data: dict) -> OpEvent:
    return OpEvent(
        **{
            **data,
            "input_ids": tuple(data["input_ids"]),
            "output_ids": tuple(data["output_ids"]),
            "inputs": tuple(_stats(s) for s in data["inputs"]),
            "outputs": tuple(_stats(s) for s in data["outputs"]),
            "source": SourceLine(**data["source"]) if data["source"] is not None else None,
            "input_values": tuple(tuple(values) for values in data["input_values"]),
            "axes": tuple(data["axes"]) if data.get("axes") is not None else None,
        }
    )


def _stats(data: dict) -> TensorStats:
    return TensorStats(**{**data, "shape": tuple(data["shape"])})
