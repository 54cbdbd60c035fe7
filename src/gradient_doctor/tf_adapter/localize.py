"""Turn a tripped step into evidence: scan the batch, replay the step, walk to the origin."""

from __future__ import annotations

import warnings

import numpy as np
import tensorflow as tf

from gradient_doctor.core.evidence import BadInput, Evidence, StepHistory, TrainingSetup
from gradient_doctor.core.findings import Origin
from gradient_doctor.core.op_trace import (
    OpEvent,
    feeding_op_types,
    largest_output,
    nearest_weight_layer,
    weights_upstream,
    where_values_grew,
)
from gradient_doctor.core.origin_search import find_origin
from gradient_doctor.tf_adapter import input_scan
from gradient_doctor.tf_adapter.guard import gradient_values
from gradient_doctor.tf_adapter.replay import ReplayResult, replay_step
from gradient_doctor.tf_adapter.step_context import StepCall
from gradient_doctor.tf_adapter.tensor_summary import sample_values


def localize(
    call: StepCall | None,
    step: int,
    named_inputs: list[tuple[str, object]],
    history: StepHistory,
    setup: TrainingSetup,
) -> Evidence:
    """Gather the evidence about one failing step.

    Args:
        call: the step to replay, or None when the step cannot be run again.
        step: 0-based index of the failing step.
        named_inputs: the step's input tensors with readable names.
        history: recent per-step statistics.
        setup: optimizer settings.
    """
    bad_inputs = input_scan.scan(named_inputs)
    if call is None:
        return Evidence(
            step,
            None,
            None,
            bad_inputs=bad_inputs,
            history=history,
            setup=setup,
            reproduced=False,
            replayed=False,
        )
    result = replay_step(call)
    if result.error is not None and not result.reproduced:
        warnings.warn(
            f"gradient-doctor: replaying step {step} raised {type(result.error).__name__}: "
            f"{result.error}; the op that started the problem may not be found.",
            stacklevel=2,
        )
    data_ids = frozenset(id(t) for t in tf.nest.flatten((call.args, call.kwargs)))
    return evidence_from_replay(result, step, bad_inputs, history, setup, data_ids)


def evidence_from_replay(
    result: ReplayResult,
    step: int,
    bad_inputs: tuple[BadInput, ...],
    history: StepHistory,
    setup: TrainingSetup,
    data_ids: frozenset[int] = frozenset(),
) -> Evidence:
    """Walk a replayed step's trace back to its origin: the evidence for the knowledge base.

    Shared by the run's own replay and the replay of a crash dump, so both name the
    same op from the same trace.

    Args:
        result: the replayed step's trace and its non-finite results.
        step: 0-based index of the failing step.
        bad_inputs: non-finite values found in the step's batch.
        history: recent per-step statistics.
        setup: optimizer settings.
        data_ids: ids of the tensors the step was called with (its batch).
    """
    search = find_origin(result.events, result.bad_ids)
    overflowed = None if result.reproduced else _overflowed_norm(result)
    origin_event = search.origin
    # No op made the non-finite value, and it is not in the batch: a constant (a
    # literal the dtype cannot hold) or a tensor made before the step. Its first
    # reader is where it entered the step.
    foreign = (
        origin_event is None
        and search.first_reader is not None
        and not set(search.unproduced_ids) & data_ids
    )
    if foreign:
        origin_event = search.first_reader
    origin = _origin(origin_event, result) if origin_event is not None else None
    forward = search.forward_op
    axis = _reduction_axis(origin_event, result) if origin_event is not None else None
    return Evidence(
        step=step,
        phase=origin_event.phase if origin_event is not None else None,
        origin=origin,
        forward_outputs=forward.outputs if forward is not None else (),
        masked_by_select=search.masked_by_select,
        bad_inputs=bad_inputs,
        history=history,
        setup=setup,
        reproduced=result.reproduced or overflowed is not None,
        reduction_axis=axis,
        overflowed_norm=overflowed,
        nonfinite_constant=foreign,
        **_upstream_facts(result, origin_event, data_ids),
    )


def _upstream_facts(result: ReplayResult, origin: OpEvent | None, data_ids) -> dict:
    """What the trace says about what fed a forward origin: the `Evidence` fields
    `feeding_ops`, `weights_layer`, `weights_upstream` and `growth`."""
    if origin is None or origin.phase != "forward":
        return {}
    events = result.events
    return {
        "feeding_ops": feeding_op_types(events, origin),
        "weights_layer": nearest_weight_layer(events, origin, WEIGHT_READS),
        "weights_upstream": weights_upstream(events, origin, WEIGHT_READS, data_ids, result.stats),
        "growth": _growth(result, origin),
    }


# The ops that read a variable's value into the step.
WEIGHT_READS = frozenset({"ReadVariableOp", "ResourceGather", "ResourceGatherNd"})
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _overflowed_norm(result: ReplayResult) -> float | None:
    """The global norm of the first update whose finite gradients' sum of squares
    overflows float32 (what trips the guard then), measured in float64; else None."""
    for grads, _, _ in getattr(result, "updates", None) or ():
        values = [np.asarray(gradient_values(g), np.float64) for g in grads if g is not None]
        total = sum(float(np.sum(np.square(v))) for v in values if v.dtype.kind == "f")
        if total > _FLOAT32_MAX and np.isfinite(total):
            return float(np.sqrt(total))
    return None


# Reductions whose axis a max-shift of their input must respect.
_REDUCTIONS = frozenset({"Sum", "Mean", "Max", "Prod"})


def _reduction_axis(origin: OpEvent, result: ReplayResult) -> int | None:
    """The axis along which the origin's output is reduced next (e.g. a softmax's sum)."""
    outputs = set(origin.output_ids)
    for event in result.events[origin.index + 1 :]:
        if event.op_type in _REDUCTIONS and event.input_ids and event.input_ids[0] in outputs:
            axes = np.asarray(result.tensors[event.input_ids[1]]).ravel()
            if axes.size == 1:
                return int(axes[0])  # as the user wrote it
    return None


# Activations past this magnitude have left any sane range: where they first crossed
# it is where a forward overflow began, even when a later op wrote the inf.
_HUGE = 1e6


def _growth(result: ReplayResult, origin: OpEvent) -> tuple[str | None, str, float] | None:
    """Where the values a forward origin overflowed on first grew past `_HUGE`."""
    grew = where_values_grew(result.events, origin, _HUGE)
    if grew is None or grew.index == origin.index:
        return None
    return (grew.layer, grew.op_type, largest_output(grew))


def _origin(event: OpEvent, result: ReplayResult) -> Origin:
    return Origin(
        op=event.op_type,
        op_name=event.op_name,
        layer=event.layer,
        source=event.source,
        gradient_of=event.gradient_of,
        inputs=event.inputs,
        outputs=event.outputs,
        input_values=tuple(sample_values(result.tensors[i]) for i in event.input_ids),
    )
