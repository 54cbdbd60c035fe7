"""Name the weight or statistic a failing step read that was already non-finite before it.

No op of the step makes such a value: the replay's walk ends at the op that first
read it, a `ReadVariableOp` of a weight, or (for a `Normalization`, which keeps its
adapted mean and variance as tensors) the layer's first op on them. The value is the
variable's state before the step: the variable, its layer, the line that created the
layer and, under `gradient-doctor run`, the call that wrote it are what the user needs.
"""

from __future__ import annotations

import numpy as np

from gradient_doctor.core.evidence import BrokenState
from gradient_doctor.core.op_trace import OpEvent
from gradient_doctor.tf_adapter._tf_internals import variable_handle
from gradient_doctor.tf_adapter.hooks import state_writes
from gradient_doctor.tf_adapter.hooks.creation_sites import creation_line, layer_at, variable_path


def broken_state(
    event: OpEvent, tensors: dict[int, object], weight_reads: frozenset[str], foreign: bool
) -> BrokenState | None:
    """The non-finite variables behind `event`, the origin (or first reader) of a replay.

    Args:
        event: the op the walk ended at.
        tensors: the replay's tensors by id.
        weight_reads: the op types that read a variable (e.g. "ReadVariableOp").
        foreign: `event` read a non-finite value that no op of the step made.

    Returns:
        A `BrokenState` when `event` read a variable that holds NaN or Inf, or is a
        layer's first reader of a non-finite value it keeps (its variables hold NaN
        or Inf); None otherwise (a literal constant, or a value the step computed).
    """
    layer = layer_at(event.layer)
    if event.op_type in weight_reads and any(not s.finite for s in event.outputs):
        handle = tensors.get(event.input_ids[0]) if event.input_ids else None
        candidates = _weights(layer) + state_writes.written_variables()
        variables = [v for v in candidates if variable_handle(v) is handle]
        variables = variables or _nonfinite(_weights(layer))
    elif foreign:
        variables = _nonfinite(_weights(layer))
    else:
        return None
    unique = {id(v): v for v in variables}.values()  # variables are not hashable
    variables = [v for v in unique if not _finite_values(v)[0]]
    if not variables:
        return None
    counts = [_finite_values(v)[1] for v in variables]
    write = next((w for v in variables if (w := state_writes.write_of(v)) is not None), None)
    return BrokenState(
        variables=tuple(variable_path(v) for v in variables),
        layer=getattr(layer, "path", None) or event.layer,
        nan=sum(nan for nan, _ in counts),
        inf=sum(inf for _, inf in counts),
        written_by=write.call if write is not None else None,
        written_at=write.source if write is not None else None,
        created_at=creation_line(layer) if layer is not None else None,
    )


def _weights(layer) -> list:
    return list(getattr(layer, "weights", None) or []) if layer is not None else []


def _nonfinite(variables: list) -> list:
    return [v for v in variables if not _finite_values(v)[0]]


def _finite_values(variable) -> tuple[bool, tuple[int, int]]:
    """(all finite, (NaN count, Inf count)) of a variable's values; non-floats are finite."""
    try:
        values = np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable)
    except Exception:  # a variable without a readable value here
        return True, (0, 0)
    if values.dtype.kind not in "fc":
        return True, (0, 0)
    nan, inf = int(np.isnan(values).sum()), int(np.isinf(values).sum())
    return nan == 0 and inf == 0, (nan, inf)
