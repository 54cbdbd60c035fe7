"""Weights a step read already non-finite, written by the update before it (PyTorch).

The guard checks the loss and the gradients before each update; an optimizer whose own
arithmetic leaves the finite range (a hand-written Adagrad dividing a zero gradient by
the root of a zero sum: 0/0) writes NaN into the weights from finite gradients, and the
next step reads them. Its rerun then names no op that made the NaN: the first op to
hold it is the read of a parameter. That is the optimizer's update of the step before,
told as such (`optimizer_overflow`), at the line that built the optimizer, with the
line of its `step` when the class is the user's own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import torch

from gradient_doctor.core.evidence import Evidence, StateValues, UpdateOverflow
from gradient_doctor.core.findings import OPTIMIZER_CREATION, SourceLine
from gradient_doctor.core.source_frames import source_line
from gradient_doctor.torch_adapter.hooks.optimizer_sites import OptimizerSites, step_code
from gradient_doctor.torch_adapter.localize import source_lines
from gradient_doctor.torch_adapter.localize.op_recorder import READ_VARIABLE


def written_by_an_update(
    evidence: Evidence,
    optimizers: Sequence[torch.optim.Optimizer],
    sites: OptimizerSites | None,
) -> Evidence:
    """`evidence` told as the optimizer's update of the step before, when its origin is
    the read of a parameter that held NaN or inf when the step began; else unchanged.

    The optimizer is named only when there is one (with several, which one trains the
    parameter is not known here)."""
    origin = evidence.origin
    if origin is None or origin.op != READ_VARIABLE or origin.inputs or not origin.outputs:
        return evidence
    held = origin.outputs[0]
    if not (held.nan or held.inf) or evidence.step is None or len(optimizers) != 1:
        return evidence
    (optimizer,) = optimizers
    size = math.prod(held.shape) if held.shape and None not in held.shape else 0
    finite = [abs(v) for v in (held.min, held.max) if v is not None and math.isfinite(v)]
    weight = StateValues(
        origin.op_name, held.dtype, size, held.nan, held.inf, max(finite) if finite else None
    )
    overflow = UpdateOverflow(
        optimizer=type(optimizer).__name__,
        read_at=evidence.step,
        written_at=evidence.step - 1,
        weights=(weight,),
        own_step=own_step(optimizer),
    )
    built = sites.construction(optimizer) if sites is not None else None
    if built is not None:
        origin = replace(
            origin, source=built.source, source_kind=OPTIMIZER_CREATION, variable=origin.op_name
        )
    return replace(
        evidence, step=overflow.written_at, phase=None, origin=origin, update_overflow=overflow
    )


def own_step(optimizer: torch.optim.Optimizer) -> SourceLine | None:
    """The `def step` line of the optimizer's class when the user wrote it (not torch's)."""
    code = step_code(optimizer)
    if code is None or not source_lines.is_user_file(code.co_filename):
        return None
    return source_line(code.co_filename, code.co_firstlineno, code.co_firstlineno, None, None)
