"""Walk a replayed step's op trace back from the bad results to the op that started it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from gradient_doctor.core.evidence import (
    BadInput,
    ConstantVariable,
    Evidence,
    OpCall,
    TargetScale,
)
from gradient_doctor.core.findings import Origin, TensorStats
from gradient_doctor.core.op_trace import (
    FILLS,
    HUGE,
    MEETS_A_MASK,
    SELECT_OPS,
    VIEW_OPS,
    OpEvent,
    constant_variable,
    feeding_op_types,
    forward_blowup,
    input_producers,
    largest_output,
    log_of_sum,
    nearest_weight_read,
    one_pass_variance,
    picked_softmax,
    regression_targets,
    scaled_by_constant,
    sigmoid_input,
    softmax_input,
    unowned_variable,
    weights_upstream,
    where_values_grew,
    where_zeros_began,
)
from gradient_doctor.core.summed_groups import ReductionReader, find_reduction


@dataclass(frozen=True)
class OriginSearch:
    """Result of the walk.

    Attributes:
        origin: the earliest op, in execution order, that produced a non-finite
            value from finite inputs and whose non-finite values reach the bad
            results; None when the non-finite values came from outside the step.
        forward_op: for a backward origin, the forward op whose gradient it is.
        unproduced_ids: non-finite tensors on the path that no traced op produced
            (the step's inputs or variables).
        masked_by_select: the forward op's non-finite output fed a select op.
        first_reader: when no op made the non-finite values (`origin` None), the
            earliest op that read one of `unproduced_ids`, else None.
    """

    origin: OpEvent | None
    forward_op: OpEvent | None
    unproduced_ids: tuple[int, ...]
    masked_by_select: bool
    first_reader: OpEvent | None = None


def find_origin(events: list[OpEvent], bad_ids: list[int]) -> OriginSearch:
    """Find the first op whose non-finite output reaches any of `bad_ids`.

    Only non-finite values that actually flow into the bad results count: an
    intended `-inf` attention mask that a softmax turns into zeros is never
    blamed, because the walk stops wherever a value becomes finite again.

    Args:
        events: the trace, in execution order.
        bad_ids: ids of the non-finite tensors that matter (the loss, gradients).

    Returns:
        An `OriginSearch`.
    """
    producer: dict[int, OpEvent] = {}
    for event in events:
        for tensor_id in event.output_ids:
            producer.setdefault(tensor_id, event)

    creators: list[OpEvent] = []
    unproduced: list[int] = []
    visited: set[int] = set()
    pending = list(bad_ids)
    while pending:
        tensor_id = pending.pop()
        if tensor_id in visited:
            continue
        visited.add(tensor_id)
        event = producer.get(tensor_id)
        if event is None:
            unproduced.append(tensor_id)
            continue
        bad_inputs = [
            i for i, stats in zip(event.input_ids, event.inputs) if _explains(event, stats)
        ]
        if bad_inputs and not _meets_a_mask(event, producer):
            pending.extend(bad_inputs)
        else:
            creators.append(event)

    origin = min(creators, key=lambda e: e.index) if creators else None
    forward_op = None
    masked = False
    if origin is not None and origin.forward_index is not None:
        forward_op = events[origin.forward_index]
        masked = _feeds_select_while_nonfinite(events, forward_op)
    first_reader = None
    if origin is None and unproduced:
        readers = [e for e in events if set(unproduced).intersection(e.input_ids)]
        first_reader = readers[0] if readers else None
    return OriginSearch(origin, forward_op, tuple(sorted(set(unproduced))), masked, first_reader)


# Ops that map -inf to a finite value (exp(-inf) = 0; a softmax gives a masked entry
# weight 0): an input whose only non-finite values are -inf (a mask written before the
# op) cannot explain their non-finite output (a softmax's NaN is its own: 0 / 0 in a row
# masked everywhere).
_FINITE_AT_MINUS_INF = frozenset({"Exp", "Expm1", "Softplus", "Softmax"})
# Ops whose -inf inputs explain -inf outputs (a masked entry keeps its -inf in a
# log-softmax), but whose NaN (a row with no finite entry: -inf - -inf) or -inf out of
# a reduction over the row (a log-sum-exp of a row masked everywhere) is their own.
_OWN_NAN_AT_MINUS_INF = frozenset({"LogSoftmax"})
_OWN_MINUS_INF_AT_MINUS_INF = frozenset({"Logsumexp"})


def _meets_a_mask(event: OpEvent, producer: dict[int, OpEvent]) -> bool:
    """Whether `event` made NaN from an input whose only non-finite values are a fill's -inf."""
    if event.op_type not in MEETS_A_MASK or not any(out.nan for out in event.outputs):
        return False
    return any(
        not stats.finite
        and stats.nan == 0
        and stats.pos_inf == 0
        and getattr(producer.get(key), "op_type", None) in FILLS
        for key, stats in zip(event.input_ids, event.inputs)
    )


def _explains(event: OpEvent, stats) -> bool:
    """Whether the non-finite values of an input of `event` can explain its own."""
    if stats.finite:
        return False
    only_minus_inf = stats.nan == 0 and stats.pos_inf == 0 and stats.neg_inf > 0
    if not only_minus_inf:
        return True
    if event.op_type in _OWN_NAN_AT_MINUS_INF:
        return not any(output.nan for output in event.outputs)
    return event.op_type not in _FINITE_AT_MINUS_INF | _OWN_MINUS_INF_AT_MINUS_INF


def _feeds_select_while_nonfinite(events: list[OpEvent], forward_op: OpEvent) -> bool:
    """True when `forward_op` produced non-finite values that a select op consumed."""
    bad_outputs = {i for i, s in zip(forward_op.output_ids, forward_op.outputs) if not s.finite}
    if not bad_outputs:
        return False
    frontier = set(bad_outputs)
    # Follow the non-finite values forward (through elementwise ops that keep
    # them non-finite) until a select swallows them.
    for event in events[forward_op.index + 1 :]:
        if event.phase != "forward":
            continue
        if not frontier.intersection(event.input_ids):
            continue
        if event.op_type in SELECT_OPS:
            return True
        frontier.update(i for i, s in zip(event.output_ids, event.outputs) if not s.finite)
    return False


@dataclass(frozen=True)
class TracedOrigin:
    """What a step's op trace says about where its non-finite values began.

    Attributes:
        event: the op the evidence names: the origin, or, when no op of the step made
            the non-finite values and the step's batch did not hold them, the first op
            that read one (a constant, or a tensor made before the step); else None.
        foreign: `event` is that first reader.
        evidence: the evidence the trace alone gives (the origin, its phase, the forward
            op of a backward origin, and for a forward origin what fed it); the adapter
            adds what only it can read (the batch, the history, its own state).
    """

    event: OpEvent | None
    foreign: bool
    evidence: Evidence


def trace_evidence(
    events: Sequence[OpEvent],
    bad_ids: Sequence[int],
    step: int | None,
    data_ids: frozenset[int] = frozenset(),
    weight_reads: frozenset[str] = frozenset(),
    stats: Mapping[int, TensorStats | None] | None = None,
    input_values: Callable[[OpEvent], tuple[tuple[float, ...], ...]] | None = None,
    reductions: ReductionReader | None = None,
    variable_values: Mapping[int, str] | None = None,
) -> TracedOrigin:
    """Walk a replayed step's trace back to its origin: the evidence for the knowledge base.

    Every adapter's replay ends here, so the same trace names the same op whatever
    framework recorded it.

    Args:
        events: the step's ops, in execution order.
        bad_ids: the non-finite tensors that matter (the loss, the gradients).
        step: 0-based index of the failing step.
        data_ids: ids of the tensors the step was called with (its batch).
        weight_reads: the op types that read a variable's value into the step.
        stats: the summary of each tensor id (for the scalars upstream of the origin);
            None: only what the events say.
        input_values: a few values of each input of an event, for the report; None
            takes the event's own `input_values`.
        reductions: the adapter's reader of its framework's reductions, for the one
            that sums the origin's output next (`summed_groups`); None: not looked for.
        variable_values: ids of tensors holding a trained variable's value as the step
            read it (the output of a read op, or a value a framework's fast path read
            with no op), with the variable's name (`weights_upstream`).
    """
    search = find_origin(list(events), list(bad_ids))
    event = search.origin
    foreign = (
        event is None
        and search.first_reader is not None
        and not set(search.unproduced_ids) & data_ids
    )
    if foreign:
        event = search.first_reader
    forward = search.forward_op
    reduction = (
        find_reduction(events, event, reductions)
        if event is not None and reductions is not None
        else None
    )
    evidence = Evidence(
        step=step,
        phase=event.phase if event is not None else None,
        origin=_origin(event, input_values, events) if event is not None else None,
        forward_outputs=forward.outputs if forward is not None else (),
        masked_by_select=search.masked_by_select,
        nonfinite_constant=foreign,
        reduction=reduction,
        reduction_axis=reduction.axis
        if reduction is not None and reduction.kind == "axis"
        else None,
        same_op_calls=same_op_calls(events, event) if event is not None else (),
        target_scale=_target_scale(events),
        input_scale=_input_scale(events, data_ids),
        bad_inputs=_fed_nonfinite(events, search, data_ids) if event is None else (),
        forward_blowup=_blowup(events, event),
        picked_softmax=_picked_softmax(events, forward if forward is not None else event),
        logged_softmax=_logged_softmax(events, forward if forward is not None else event),
        **_upstream_facts(events, event, data_ids, weight_reads, stats or {}, variable_values),
    )
    return TracedOrigin(event, foreign, evidence)


def _picked_softmax(events, log: OpEvent | None) -> OpCall | None:
    """The softmax a log's input is picked from (`op_trace.picked_softmax`), as a call on
    the user's line; None for any other op, or when there is none."""
    if log is None or log.op_type != "Log" or log.phase != "forward":
        return None
    return _call_or_none(picked_softmax(events, log))


def _upstream_facts(
    events, origin: OpEvent | None, data_ids, weight_reads, stats, variable_values=None
) -> dict:
    """What the trace says about what fed a forward origin: the `Evidence` fields
    `feeding_ops`, `weights_layer`, `weights_variable`, `weights_variable_largest`,
    `read_variables`, `weights_upstream`, `weights_upstream_of`, `growth`, `log_of_sum`,
    `input_producers`, `sigmoid_input`,
    `zeros_began`, `scaled_up`, `one_pass_variance` and `constant_variable`."""
    if origin is None or origin.phase != "forward":
        return {}
    read = nearest_weight_read(events, origin, weight_reads)
    values = variable_values or {}
    return {
        "feeding_ops": feeding_op_types(events, origin),
        "weights_layer": read.layer if read is not None else None,
        "weights_variable": (
            _unowned_name(events, read, weight_reads, values)
            if read is not None
            else next((values[key] for key in origin.input_ids if key in values), None)
        ),
        "weights_variable_largest": (
            read.outputs[0].largest_magnitude if read is not None and read.outputs else None
        ),
        "read_variables": tuple(values.get(key) for key in origin.input_ids),
        "weights_upstream": weights_upstream(events, origin, weight_reads, data_ids, stats, values),
        "weights_upstream_of": tuple(
            weights_upstream(
                events, replace(origin, input_ids=(key,)), weight_reads, data_ids, stats, values
            )
            for key in origin.input_ids
        ),
        "growth": _growth(events, origin),
        "log_of_sum": _call_or_none(log_of_sum(events, origin)),
        "input_producers": tuple(
            None if event is None or event.source is None else _call(event)
            for event in input_producers(events, origin)
        ),
        "sigmoid_input": _call_or_none(sigmoid_input(events, origin)),
        "zeros_began": _call_or_none(where_zeros_began(events, origin)),
        "scaled_up": _scaled_up(events, origin),
        "one_pass_variance": _one_pass_variance(events, origin),
        "constant_variable": _constant_variable(events, origin, values),
    }


def _constant_variable(events, origin: OpEvent, values: dict) -> ConstantVariable | None:
    found = constant_variable(events, origin, values)
    if found is None:
        return None
    number, name, value = found
    return ConstantVariable(name, value, number)


def _unowned_name(events, read: OpEvent, weight_reads, values: dict) -> str | None:
    """The name of the variable `read` reads when no layer owns it: the adapter's name for
    the value it read (`w` for a `tf.Variable(..., name="w")`), else the read's own."""
    unowned = unowned_variable(events, read, weight_reads)
    if unowned is None:
        return None
    return next((values[key] for key in read.output_ids if key in values), unowned)


def _one_pass_variance(events, origin: OpEvent) -> tuple[OpCall, OpCall] | None:
    """`Evidence.one_pass_variance`: the subtraction and the mean of squares of a variance
    computed in one pass, both on a user's line; None without one."""
    found = one_pass_variance(events, origin)
    if found is None or any(event.source is None for event in found):
        return None
    return _call(found[0]), _call(found[1])


def _scaled_up(events, origin: OpEvent) -> tuple[OpCall, float, float] | None:
    """`Evidence.scaled_up`: the constant scaling the origin's input last went through,
    on a user's line; None without one."""
    found = scaled_by_constant(events, origin)
    if found is None or found[0].source is None:
        return None
    event, factor, before = found
    return _call(event), factor, before


def _fed_nonfinite(
    events: Sequence[OpEvent], search: OriginSearch, data_ids: frozenset[int]
) -> tuple[BadInput, ...]:
    """The step's own inputs (`data_ids`) that held non-finite values no op of the step
    made, each with the user's line that read it first: the data itself was bad."""
    found = []
    for key in search.unproduced_ids:
        if key not in data_ids:
            continue
        reader = next((e for e in events if key in e.input_ids), None)
        if reader is None:
            continue
        stats = reader.inputs[reader.input_ids.index(key)]
        if stats.finite:
            continue
        found.append(BadInput("", stats.shape, stats.nan, stats.inf, (), (), read_at=reader.source))
    return tuple(found)


# The ops a model's first layer reads its features with (a dense layer, a convolution).
_FIRST_LAYER_OPS = frozenset(
    {"MatMul", "BatchMatMulV2", "Conv1D", "Conv2D", "Conv3D", "DepthwiseConv2dNative"}
)


def _input_scale(events: Sequence[OpEvent], data_ids: frozenset[int]) -> tuple[str, float] | None:
    """(where it was read, largest finite magnitude) of the features the step fed its
    first layer: the first dense or convolution op's input that no op of the step made
    and no weight read gave (or rows of one the step picked: `X[idx]`, a gather, a cast),
    in floating point; None when there is none (a mask or a table made before the step
    is read by other ops, and is not the features)."""
    for event in events:
        if event.phase != "forward" or event.op_type not in _FIRST_LAYER_OPS:
            continue
        made = {output: before for before in events[: event.index] for output in before.output_ids}
        for key, stats in zip(event.input_ids, event.inputs):
            if not stats.dtype.startswith(("float", "bfloat", "half")):
                continue
            if _picked_from(key, made) not in data_ids:
                continue
            largest = stats.largest_magnitude
            if largest is None:
                continue
            place = f" at {event.source.file}:{event.source.line}" if event.source else ""
            return f"read{place}", largest
    return None


# Ops that pass on rows or a view of a tensor, or its values in another dtype: the batch
# `X[idx]` the step indexed out of the data is still the data's features.
_PICKS = VIEW_OPS | {"Index", "IndexSelect", "GatherV2", "Cast"}
_PICKS_FOLLOWED = 8


def _picked_from(key: int, made: dict[int, OpEvent]) -> int:
    """The tensor `key` was picked from (`_PICKS`), through at most `_PICKS_FOLLOWED`
    ops; `key` itself when no such op made it."""
    for _ in range(_PICKS_FOLLOWED):
        producer = made.get(key)
        if producer is None or producer.op_type not in _PICKS or not producer.input_ids:
            break
        key = producer.input_ids[0]
    return key


def _target_scale(events: Sequence[OpEvent]) -> TargetScale | None:
    """The targets of the step's regression loss op, when the framework ran one; None when
    they are the batch's input features themselves (an autoencoder's reconstruction
    loss: their scale is the input's, which `input_scale` names, and standardising the
    inputs is the fix, not the targets)."""
    found = regression_targets(events)
    largest = found[1].largest_magnitude if found is not None else None
    if largest is None:
        return None
    loss = next(e for e in events if e.phase == "forward" and e.op_type == found[0])
    made = {output: before for before in events[: loss.index] for output in before.output_ids}
    target = _picked_from(loss.input_ids[1], made) if len(loss.input_ids) > 1 else None
    if target is not None and target in _first_layer_inputs(events):
        return None
    return TargetScale(f"of {found[0]}", largest)


def _first_layer_inputs(events: Sequence[OpEvent]) -> frozenset[int]:
    """The tensors the step's first dense or convolution op read, each followed back to
    what it was picked from (`_picked_from`: `x = data[perm]` is `data`)."""
    for event in events:
        if event.phase == "forward" and event.op_type in _FIRST_LAYER_OPS:
            made = {out: before for before in events[: event.index] for out in before.output_ids}
            return frozenset(_picked_from(key, made) for key in event.input_ids)
    return frozenset()


def same_op_calls(events: Sequence[OpEvent], origin: OpEvent) -> tuple[OpCall, ...]:
    """The step's other forward calls of a forward origin's op that a user's line made.

    A rule guarding the origin reads their inputs to guard those in the same risky
    range too: the step that failed on one bare log often holds another one a step
    away from failing. A call met more than once (a loop) is listed each time.
    """
    if origin.phase != "forward" or origin.source is None:
        return ()
    here = _place(origin.source)
    return tuple(
        _call(event)
        for event in events
        if event.phase == "forward"
        and event.op_type == origin.op_type
        and event.source is not None
        and event.index != origin.index
        and _place(event.source) != here
    )


def _blowup(events: Sequence[OpEvent], origin: OpEvent | None) -> tuple[OpCall, ...]:
    """`Evidence.forward_blowup`: where the step's forward values first grew past `HUGE`
    (on their way to a forward origin's overflow, or, when no op went non-finite, to the
    loss), with the other calls of that op on a user's line whose output passed `HUGE`
    too; () when none did, or no user's line made it, or the origin is a backward op."""
    if origin is None:
        grew = forward_blowup(events, HUGE)
    elif origin.phase == "forward":
        grew = where_values_grew(events, origin, HUGE)
    else:
        return ()
    # A read of weights already that large (updates threw them) is no op of the step's.
    if grew is None or grew.source is None or not grew.inputs:
        return ()
    places = {_place(grew.source): grew}
    for event in events:
        if (
            event.phase == "forward"
            and event.op_type == grew.op_type
            and event.source is not None
            and largest_output(event) > HUGE
        ):
            places.setdefault(_place(event.source), event)
    return tuple(_call(event) for event in places.values())


def _logged_softmax(events: Sequence[OpEvent], log: OpEvent | None) -> OpCall | None:
    """The softmax a log reads directly (`op_trace.softmax_input`), as a call on the
    user's line; None for any other op, or when there is none."""
    if log is None or log.op_type != "Log" or log.phase != "forward":
        return None
    return _call_or_none(softmax_input(events, log))


def _call_or_none(event: OpEvent | None) -> OpCall | None:
    """`event` as a call on the user's line, or None when it or its line is unknown."""
    return None if event is None or event.source is None else _call(event)


def _call(event: OpEvent) -> OpCall:
    """`event` as a call on the user's line (its source is known)."""
    return OpCall(
        event.op_type,
        event.source,
        event.inputs,
        event.source_kind,
        event.framework_op,
        event.outputs,
    )


def _place(source) -> tuple:
    """Where a call stands: its file, line and span on the line."""
    return (source.file, source.line, source.column, source.end_column)


def _growth(events, origin: OpEvent) -> tuple[str | None, str, float] | None:
    """Where the values a forward origin overflowed on first grew past `HUGE`."""
    grew = where_values_grew(events, origin, HUGE)
    if grew is None or grew.index == origin.index:
        return None
    return (grew.layer, grew.op_type, largest_output(grew))


def _origin(event: OpEvent, input_values, events: Sequence[OpEvent]) -> Origin:
    forward = None
    if event.forward_index is not None and 0 <= event.forward_index < len(events):
        forward = events[event.forward_index]
    return Origin(
        op=event.op_type,
        framework_op=event.framework_op,
        framework_gradient_of=forward.framework_op if forward is not None else None,
        op_name=event.op_name,
        layer=event.layer,
        source=event.source,
        source_kind=event.source_kind,
        gradient_of=event.gradient_of,
        inputs=event.inputs,
        outputs=event.outputs,
        input_values=input_values(event) if input_values is not None else event.input_values,
    )
