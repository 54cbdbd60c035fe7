"""Turn a tripped step into evidence: scan the batch, replay the step, walk to the origin."""

from __future__ import annotations

import itertools
import warnings
from dataclasses import replace

import numpy as np
import tensorflow as tf

from gradient_doctor.core.evidence import (
    BadInput,
    BrokenState,
    Evidence,
    StepHistory,
    TrainingSetup,
)
from gradient_doctor.core.findings import Origin
from gradient_doctor.core.knowledge.layer_groups import layer_of_name
from gradient_doctor.core.origin_search import trace_evidence
from gradient_doctor.tf_adapter.hooks.creation_sites import (
    creation_line,
    layer_of_variable,
    variable_path,
)
from gradient_doctor.tf_adapter.localize import input_scan
from gradient_doctor.tf_adapter.localize.broken_state import broken_state
from gradient_doctor.tf_adapter.localize.missing_gradients import variable_name
from gradient_doctor.tf_adapter.localize.reductions import TensorflowReductions
from gradient_doctor.tf_adapter.localize.replay import ReplayResult, replay_step
from gradient_doctor.tf_adapter.localize.step_context import StepCall
from gradient_doctor.tf_adapter.step.guard import gradient_values
from gradient_doctor.tf_adapter.step.tensor_summary import sample_values, summarize


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
    same op from the same trace. The walk is the core's (`trace_evidence`, which finds
    the reduction that sums the origin's output through `TensorflowReductions`); what
    only TensorFlow's tensors tell is added here: a variable that held non-finite
    values before the step, an update whose finite gradients' norm overflowed.

    Args:
        result: the replayed step's trace and its non-finite results.
        step: 0-based index of the failing step.
        bad_inputs: non-finite values found in the step's batch.
        history: recent per-step statistics.
        setup: optimizer settings.
        data_ids: ids of the tensors the step was called with (its batch).
    """
    traced = trace_evidence(
        result.events,
        result.bad_ids,
        step,
        data_ids,
        WEIGHT_READS,
        result.stats,
        input_values=lambda event: tuple(sample_values(result.tensors[i]) for i in event.input_ids),
        reductions=TensorflowReductions(result.tensors),
        variable_values=_variable_values(result, data_ids),
    )
    event, origin = traced.event, traced.evidence.origin
    overflowed = None if result.reproduced else _overflowed_update(result)
    broken = None
    if event is not None:
        broken = broken_state(event, result.tensors, WEIGHT_READS, traced.foreign)
        if broken is not None:
            origin = _state_origin(origin, broken)
    elif overflowed is not None:
        origin = overflowed[1]
    return replace(
        traced.evidence,
        origin=origin,
        bad_inputs=bad_inputs,
        history=history,
        setup=setup,
        reproduced=result.reproduced or overflowed is not None,
        overflowed_norm=overflowed[0] if overflowed is not None else None,
        nonfinite_constant=traced.foreign and broken is None,
        broken_state=broken,
    )


# The ops that read a variable's value into the step.
WEIGHT_READS = frozenset({"ReadVariableOp", "ResourceGather", "ResourceGatherNd"})


def _variable_values(result: ReplayResult, data_ids: frozenset[int]) -> dict[int, str]:
    """Tensors of the trace that hold a trained variable's value as the step read it,
    with the variable's name: a read op's output (whose own name does not say which
    variable it read), and a value no op of the trace made (an eager op's fast path
    reads a variable passed to it, `tf.sqrt(noise_var)`, with no ReadVariableOp the op
    callbacks see). Matched by dtype, shape and value against the variables the step
    updates (at the replay they hold the values the step read); the step's batch is
    never one."""
    made = {key for event in result.events for key in event.output_ids} | set(data_ids)
    candidates = {key for event in result.events for key in event.input_ids} - made
    candidates |= {
        key for event in result.events if event.op_type in WEIGHT_READS for key in event.output_ids
    }
    variables = [v for _, updated, _ in result.updates for v in updated if v is not None]
    found = {}
    for key in candidates:
        tensor = result.tensors.get(key)
        if tensor is None or not hasattr(tensor, "shape"):
            continue
        for variable in variables:
            value = tf.convert_to_tensor(variable)  # a Keras variable or a tf.Variable
            if value.dtype != tensor.dtype or value.shape != tensor.shape:
                continue
            if bool(tf.reduce_all(tf.equal(value, tensor))):
                found[key] = variable_name(variable)
                break
    return found


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _overflowed_update(result: ReplayResult) -> tuple[float, Origin] | None:
    """The first update whose finite gradients' sum of squares overflows float32 (what
    trips the guard then): its global norm, measured in float64, and as origin the
    square of its largest gradient (the optimizer's update of that variable); else None.
    """
    for grads, variables, _ in getattr(result, "updates", None) or ():
        sums = []
        for gradient, variable in itertools.zip_longest(grads, variables):
            if gradient is None:
                continue
            values = np.asarray(gradient_values(gradient), np.float64)
            if values.dtype.kind == "f":
                sums.append((float(np.sum(np.square(values))), gradient, variable))
        total = sum(total for total, _, _ in sums)
        if total > _FLOAT32_MAX and np.isfinite(total):
            _, gradient, variable = max(sums, key=lambda item: item[0])
            return float(np.sqrt(total)), _update_origin(gradient, variable)
    return None


def _update_origin(gradient, variable) -> Origin:
    """The optimizer's square of `variable`'s gradient, placed at its layer's creation line."""
    values = gradient_values(gradient)
    name = variable_path(variable) if variable is not None else None
    layer = layer_of_variable(variable) if variable is not None else None
    source = creation_line(layer) if layer is not None else None
    layer_path = getattr(layer, "path", None) or (
        layer_of_name(name) if name and "/" in name else None
    )
    return Origin(
        op="Square",
        op_name=f"update/{name or 'gradient'}/Square",
        layer=layer_path,
        source=source,
        gradient_of=None,
        inputs=(summarize(values),),
        outputs=(summarize(tf.square(values)),),
        input_values=(sample_values(values),),
        source_kind="layer_creation" if source is not None else "op",
        variable=name,
    )


def _state_origin(origin: Origin, state: BrokenState) -> Origin:
    """The origin placed at the line that wrote the broken state (else its layer's
    creation line), naming the variable."""
    if state.written_at is not None:
        source, kind = state.written_at, "state_write"
    elif state.created_at is not None:
        source, kind = state.created_at, "layer_creation"
    else:
        source, kind = origin.source, origin.source_kind
    return replace(
        origin, source=source, source_kind=kind, variable=state.variables[0], layer=state.layer
    )
