"""A framework-neutral record of the ops one replayed step executed, in order."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gradient_doctor.core.findings import SourceLine, TensorStats

# Ops that only reshape, view, copy or index their first input, in TensorFlow's names
# and the torch recorder's (`torch_adapter/localize/op_names.py`: an aten op's name in
# CamelCase, `_unsafe_view` -> "UnsafeView", `contiguous` -> "Clone"): the values they
# hold are their input's. PyTorch's `select` (`x[:, 0]`) is left out: the recorder names
# it "Select", the core's name for a `where`, which picks from two branches.
VIEW_OPS = frozenset(
    {
        # TensorFlow
        "Reshape",
        "Squeeze",
        "ExpandDims",
        "Identity",
        "StridedSlice",
        "Slice",
        "Transpose",
        # PyTorch
        "Unsqueeze",
        "View",
        "UnsafeView",
        "Expand",
        "Permute",
        "T",
        "Clone",
        "Alias",
        "Detach",
        "Flatten",
        "Contiguous",
    }
)


# Activations past this magnitude have left any sane range: where they first crossed
# it is where a forward overflow began, even when a later op wrote the inf.
HUGE = 1e6


@dataclass(frozen=True)
class OpEvent:
    """One executed op: what it read, what it wrote, and where the user created it.

    Tensor ids are opaque integers that identify the same tensor across events
    (an adapter keeps the tensors alive while the trace is in use).

    Attributes:
        index: position in execution order.
        op_type: the framework's op type (e.g. "Exp", "SqrtGrad").
        op_name: a readable name, "layer/path/OpType".
        layer: the Keras layer (or module) path active when the op ran, if any.
        phase: "forward" or "backward".
        gradient_of: for a backward op, the forward op type whose gradient it computes.
        forward_index: for a backward op, the index of that forward op's event.
        input_ids, output_ids: tensor ids.
        inputs, outputs: value summaries, aligned with the ids.
        source: the user's line that created the op (for a backward op, the line
            that created its forward op).
        input_values: a few of the input values, for the report.
        source_kind: what `source` is (`SOURCE_KINDS` in `findings`): "op", or
            "layer_creation" for an op a library layer's own code ran.
        axes: the axes the op reduced or scattered along when the framework passes
            them as arguments, not tensors (PyTorch's `dim` of `sum`, `index_add_`),
            as the call wrote them; None otherwise (TensorFlow's are an input tensor).
        framework_op: the framework's own name for the op where it is not `op_type`
            (PyTorch's aten name, `mse_loss` for "MseLoss", `div` for "RealDiv"): the
            report names the op so; None when `op_type` is the framework's name.
    """

    index: int
    op_type: str
    op_name: str
    layer: str | None
    phase: str
    gradient_of: str | None
    forward_index: int | None
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    inputs: tuple[TensorStats, ...]
    outputs: tuple[TensorStats, ...]
    source: SourceLine | None
    input_values: tuple[tuple[float, ...], ...] = ()
    source_kind: str = "op"
    axes: tuple[int, ...] | None = None
    framework_op: str | None = None


# Regression losses a framework computes as one op (PyTorch's `F.mse_loss`,
# `F.smooth_l1_loss`, `F.huber_loss`, `F.l1_loss`), in the recorder's names: their
# second input is the targets.
REGRESSION_LOSSES = frozenset({"MseLoss", "SmoothL1Loss", "HuberLoss", "L1Loss"})


def regression_targets(events: Sequence[OpEvent]) -> tuple[str, TensorStats] | None:
    """The op type and the targets of the step's first forward regression loss op
    (`REGRESSION_LOSSES`), or None when the step ran none."""
    for event in events:
        if event.phase == "forward" and event.op_type in REGRESSION_LOSSES:
            if len(event.inputs) > 1:
                return event.op_type, event.inputs[1]
    return None


def weights_upstream(
    events: Sequence[OpEvent],
    target: OpEvent,
    weight_reads: frozenset[str],
    data_ids: frozenset[int],
    stats: Mapping[int, TensorStats | None],
    variable_values: Mapping[int, str] | None = None,
) -> bool | None:
    """Whether trainable weights feed `target`'s inputs, walking the trace upstream.

    Args:
        events: the step's trace.
        target: an event of the trace.
        weight_reads: the op types that read a variable (e.g. "ReadVariableOp").
        data_ids: ids of the step's own inputs (the batch).
        stats: the summary of each tensor id.
        variable_values: ids of tensors that hold a trained variable's value though no
            read op of the trace made them (a framework's fast path read the variable
            inside the op that used it), with the variable's name.

    Returns:
        True when a variable read lies upstream; False when every path leads back
        to the batch or to scalar constants (the op sees the data itself); None
        when some path ends at a tensor the trace does not explain (computed
        before the step), which could hold weights.
    """
    producers = _producers_before(events, target)
    pending, seen, explained = list(target.input_ids), set(), True
    while pending:
        tensor = pending.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        producer = producers.get(tensor)
        if variable_values and tensor in variable_values:
            return True
        if producer is None:
            summary = stats.get(tensor)
            constant = summary is not None and math.prod(d or 2 for d in summary.shape) <= 1
            explained = explained and (tensor in data_ids or constant)
        elif producer.op_type in weight_reads:
            return True
        else:
            pending.extend(producer.input_ids)
    return False if explained else None


def feeding_op_types(events: Sequence[OpEvent], target: OpEvent, depth: int = 3) -> frozenset[str]:
    """The types of the ops up to `depth` steps upstream of `target` (e.g. a Sigmoid
    two ops before the Log of `log(1 - sigmoid(x))`)."""
    producers = _producers_before(events, target)
    found: set[str] = set()
    frontier = list(target.input_ids)
    for _ in range(depth):
        feeding = [producers[t] for t in frontier if t in producers]
        found.update(event.op_type for event in feeding)
        frontier = [t for event in feeding for t in event.input_ids]
    return frozenset(found)


def input_producers(events: Sequence[OpEvent], target: OpEvent) -> tuple[OpEvent | None, ...]:
    """The event that made each of `target`'s inputs, aligned with them, looking through
    ops that only reshape, view or index a value (`VIEW_OPS`: the relu behind
    `F.relu(h).squeeze(-1)`); None for an input no earlier op of the trace made (a
    weight read, the batch, a constant)."""
    producers = _producers_before(events, target)
    found = []
    for tensor in target.input_ids:
        producer = producers.get(tensor)
        while producer is not None and producer.op_type in VIEW_OPS and producer.input_ids:
            producer = producers.get(producer.input_ids[0])
        found.append(producer)
    return tuple(found)


# Ops that pick a value's entries without changing them (a diagonal, rows by index).
_PICKS = VIEW_OPS | {
    "Diagonal", "DiagonalCopy", "Diag", "MatrixDiagPartV3", "MatrixDiagPart", "GatherV2", "Index"
}  # fmt: skip
_SCALINGS = frozenset({"RealDiv", "Div", "Mul"})
# How far upstream of an op its input's scaling is looked for.
_SCALING_FOLLOWED = 6


def scaled_by_constant(
    events: Sequence[OpEvent], target: OpEvent
) -> tuple[OpEvent, float, float] | None:
    """(the op, the factor, the largest magnitude before it) of a division by a constant
    scalar below 1, or a multiplication by one above 1, that `target`'s first input went
    through last, upstream through ops that only pick entries (`sim.diag()` of `sim =
    z1 @ z2.T / tau`): a temperature scaling the values up. None when there is none."""
    producers = _producers_before(events, target)
    tensor = target.input_ids[0] if target.input_ids else None
    for _ in range(_SCALING_FOLLOWED):
        producer = producers.get(tensor) if tensor is not None else None
        if producer is None:
            return None
        if producer.op_type in _SCALINGS and len(producer.inputs) in (1, 2):
            return _constant_factor(producer)
        if producer.op_type not in _PICKS or not producer.input_ids:
            return None
        tensor = producer.input_ids[0]
    return None


def _constant_factor(event: OpEvent) -> tuple[OpEvent, float, float] | None:
    """(event, factor, largest magnitude of the scaled input) for a scaling by a constant
    scalar that amplifies (a factor above 1); else None. A framework that records only
    tensor inputs (PyTorch's `x / 0.005`: the number is no tensor) gives the factor as
    the ratio of the output's largest magnitude to the input's."""
    if len(event.inputs) == 1:
        before, after = event.inputs[0].largest_magnitude, largest_output(event)
        if not before or not after or after <= before:
            return None
        return event, after / before, before
    values, scalar = event.inputs
    if event.op_type == "Mul" and _is_constant_scalar(values):
        values, scalar = scalar, values
    if not _is_constant_scalar(scalar) or not scalar.min:
        return None
    factor = 1.0 / scalar.min if event.op_type in ("RealDiv", "Div") else scalar.min
    before = values.largest_magnitude
    if abs(factor) <= 1.0 or before is None:
        return None
    return event, abs(factor), before


def _is_constant_scalar(stats: TensorStats) -> bool:
    """One finite value (a Python number the op read, or a 0-d tensor)."""
    size = 1
    for dimension in stats.shape:
        size *= dimension if dimension is not None else 2
    return size == 1 and stats.min is not None and stats.min == stats.max and stats.finite


# Ops whose exact zeros from inputs that held none are an underflow: a product of many
# factors below 1, an exp of a large negative number, a softmax's far-off entries.
UNDERFLOWS = frozenset({"Prod", "Mul", "Exp", "Pow", "Softmax", "Sigmoid", "RealDiv", "Div"})
# How far upstream the zeros are followed.
_ZEROS_FOLLOWED = 12


def where_zeros_began(events: Sequence[OpEvent], target: OpEvent) -> OpEvent | None:
    """The op that underflowed to the exact zeros `target` read as its first input: walked
    upstream along the input holding zeros, the first op that wrote zeros from inputs
    holding none, when it is one that underflows (`UNDERFLOWS`: `prod` of 300
    probabilities); None when the zeros came otherwise (a relu, a mask, the data)."""
    producers = _producers_before(events, target)
    current = target
    for _ in range(_ZEROS_FOLLOWED):
        zeroed = [
            tensor
            for tensor, stats in zip(current.input_ids, current.inputs, strict=False)
            if stats.zeros
        ]
        producer = producers.get(zeroed[0]) if zeroed else None
        if producer is None or producer.index >= current.index:
            return None
        if not any(stats.zeros for stats in producer.inputs):
            return producer if producer.op_type in UNDERFLOWS else None
        current = producer
    return None


# Ops that pick some of their first input's values (a gather by the targets' ids, an
# index), besides the views: a log of what they picked is what they pick of the log.
PICKS = VIEW_OPS | {"GatherV2", "GatherNd", "Gather", "Index", "IndexSelect", "TakeAlongDim"}


def picked_softmax(events: Sequence[OpEvent], target: OpEvent) -> OpEvent | None:
    """The softmax whose output `target`'s first input is picked from, through ops that
    only pick or reshape values (`PICKS`), with nothing else of the forward pass reading
    that output or any value on the way; None when there is none. Then `target`'s op
    (a log) can move onto the softmax unseen by the rest of the step: the log of
    `probs.gather(1, y)` taken as a log_softmax before the gather."""
    producers = _producers_before(events, target)
    forward = [event for event in events if event.phase == "forward"]
    read = {tensor for event in forward for tensor in event.input_ids}
    # PyTorch's autograd saves an op's output for its backward as a detached alias, which
    # nothing of the forward pass reads: no reader of the value.
    forward = [
        event
        for event in forward
        if event.op_type not in ("Detach", "Alias") or read.intersection(event.output_ids)
    ]
    tensor = target.input_ids[0] if target.input_ids else None
    for _ in range(_ZEROS_FOLLOWED):
        readers = [event for event in forward if tensor in event.input_ids]
        producer = producers.get(tensor)
        if producer is None or len(readers) != 1:
            return None
        if producer.op_type == "Softmax":
            return producer
        if producer.op_type not in PICKS or not producer.input_ids:
            return None
        tensor = producer.input_ids[0]
    return None


def softmax_input(events: Sequence[OpEvent], target: OpEvent) -> OpEvent | None:
    """The softmax whose output `target` reads as its first input (through views),
    whatever else reads it; else None: the log of it can be its log_softmax in place."""
    made = _maker_through_views(_producers_before(events, target))
    first = made(target.input_ids[0]) if target.input_ids else None
    return first if first is not None and first.op_type == "Softmax" else None


def sigmoid_input(events: Sequence[OpEvent], target: OpEvent) -> OpEvent | None:
    """The sigmoid whose output `target` reads as its first input, itself or through one
    subtraction (`log(1 - p)` of `p = sigmoid(z)`), looking through views; else None."""
    made = _maker_through_views(_producers_before(events, target))
    first = made(target.input_ids[0]) if target.input_ids else None
    if first is not None and first.op_type == "Sub":
        first = next(
            (p for p in map(made, first.input_ids) if p is not None and p.op_type == "Sigmoid"),
            None,
        )
    return first if first is not None and first.op_type == "Sigmoid" else None


def nearest_weight_read(
    events: Sequence[OpEvent], target: OpEvent, weight_reads: frozenset[str]
) -> OpEvent | None:
    """The read of the variable closest upstream of `target` (breadth first), or None.

    Its layer is the layer whose weights feed the op: `z_log_var` for the exp in a VAE's
    sampling layer, which has no weights of its own (None: the read ran outside any).
    A variable only added to the values (a bias) shifts them, one that multiplies them
    scales them: of `x @ w + b`, `w` is the weight that drives them, one level further
    up, so a read met first by an addition gives way to one met by any other op on the
    next level (a layer owns both; two bare variables are told apart by it).
    """
    producers = _producers_before(events, target)
    frontier, seen = [(t, target) for t in target.input_ids], set()
    added, levels_left = None, None
    while frontier and levels_left != 0:
        feeding = [(producers[t], user) for t, user in frontier if t in producers and t not in seen]
        seen.update(t for t, _ in frontier)
        for event, user in feeding:
            if event.op_type not in weight_reads:
                continue
            if user.op_type not in ADDITIONS:
                return event
            added = added or event
        if added is not None:  # one level more to look for a weight that scales
            levels_left = 1 if levels_left is None else levels_left - 1
        frontier = [(t, event) for event, _ in feeding for t in event.input_ids]
    return added


# Ops whose output holds their input's values, or their magnitudes, rearranged: a
# variable read through them reaches the op with the same values.
_KEEPS_VALUES = VIEW_OPS | {"Abs", "Neg", "Cast", "BroadcastTo", "Expand"}


def constant_variable(
    events: Sequence[OpEvent], target: OpEvent, variable_values: Mapping[int, str]
) -> tuple[int, str, float] | None:
    """The first input of `target` that is a trained variable's value, itself or through
    ops that keep its values (`_KEEPS_VALUES`), whose every element is one finite value:
    (the input's index, the variable's name, that value); None when there is none.

    Args:
        events: the step's events.
        target: the op whose inputs are looked at.
        variable_values: tensor id -> the name of the variable whose value it is.
    """
    producers = _producers_before(events, target)
    for number, tensor in enumerate(target.input_ids):
        while tensor not in variable_values:
            producer = producers.get(tensor)
            if producer is None or producer.op_type not in _KEEPS_VALUES:
                break
            tensor = producer.input_ids[0] if producer.input_ids else None
        if tensor not in variable_values:
            continue
        read = producers.get(tensor)
        stats = next(
            (s for t, s in zip(read.output_ids, read.outputs) if t == tensor), None
        ) if read is not None else None  # fmt: skip
        if stats is not None and stats.finite and stats.min is not None and stats.min == stats.max:
            return number, variable_values[tensor], stats.min
    return None


def unowned_variable(
    events: Sequence[OpEvent], read: OpEvent | None, weight_reads: frozenset[str]
) -> str | None:
    """The name of the variable `read` reads when no layer owns it, else None.

    A variable is a layer's when ops of the step ran in the layer its read names; one
    read outside every layer (a parameter set on the root module itself, a free tensor
    handed to the optimizer) has no layer whose weights a fix could bound.
    """
    if read is None:
        return None
    layers = {e.layer for e in events if e.op_type not in weight_reads and e.layer}
    return read.op_name if read.layer is None or read.layer not in layers else None


def where_values_grew(
    events: Sequence[OpEvent], target: OpEvent, threshold: float
) -> OpEvent | None:
    """The op where the values feeding `target` first grew past `threshold` in magnitude.

    Walks upstream along the input of largest magnitude and returns the earliest op
    on that path whose output exceeded `threshold` although its inputs did not:
    for a loss that overflowed on predictions of 1e30, the recurrent layer whose
    loop blew them up, not the loss. None when the path starts above `threshold`
    (the data) or never crosses it; a weight already that large is its read op (an op
    with no inputs: updates threw the weights there).
    """
    producers = _producers_before(events, target)
    crossing = None
    current = target
    while True:
        inputs = [
            (_magnitude(stats), tensor)
            for tensor, stats in zip(current.input_ids, current.inputs, strict=False)
        ]
        if not inputs:
            return crossing
        magnitude, tensor = max(inputs)
        producer = producers.get(tensor)
        if producer is None:
            return None if magnitude > threshold else crossing
        if producer.index >= current.index:  # an op that wrote its own input: no further back
            return crossing
        if magnitude > threshold and _largest_input(producer) <= threshold:
            crossing = producer
        current = producer


def forward_blowup(events: Sequence[OpEvent], threshold: float) -> OpEvent | None:
    """The op where a step's forward values first grew past `threshold` on their way to
    the last forward value past it (the loss, or what it was computed from): walked back
    along the largest inputs as `where_values_grew` does, the last such op itself when
    its own inputs stayed within `threshold`. None when no forward value passed it, or
    every path starts above it (the data, or weights that large).
    """
    huge = [e for e in events if e.phase == "forward" and largest_output(e) > threshold]
    # From the last such value back: the last may read no value of the step's (a metric's
    # `result()` of a total it kept, already that large), so the one before is tried.
    for last in reversed(huge[-_BLOWUP_TRIES:]):
        grew = (
            last
            if _largest_input(last) <= threshold
            else where_values_grew(events, last, threshold)
        )
        if grew is not None and grew.inputs:  # not weights already huge
            return grew
    return None


# How many of the last values past the threshold `forward_blowup` walks back from.
_BLOWUP_TRIES = 20


def largest_output(event: OpEvent) -> float:
    """The largest finite |value| among an event's outputs (0 when it has none)."""
    return max((_magnitude(stats) for stats in event.outputs), default=0.0)


def _magnitude(stats: TensorStats) -> float:
    """A value's largest |value|; 0 for an integer or bool tensor (a random op's key and
    counter, 1.8e19 as uint64, an index, a shape), which is no value that grew."""
    if not str(stats.dtype).startswith(_FLOATING):
        return 0.0
    return stats.largest_magnitude or 0.0


_FLOATING = ("float", "bfloat", "half", "double", "complex")


def _largest_input(event: OpEvent) -> float:
    return max((_magnitude(stats) for stats in event.inputs), default=0.0)


# Ops a variance passes through on its way to a root or a log: `var + eps`, a clamp,
# a cast. Ops that square a value, and the mean.
_CARRY_VARIANCE = frozenset({"AddV2", "Add", "Maximum", "Cast", "Identity"}) | VIEW_OPS
_SQUARES = frozenset({"Square", "Pow", "Mul"})
_MEANS = frozenset({"Mean"})
# How many such ops the walk from the root's input to the subtraction crosses at most.
_VARIANCE_STEPS = 3


def one_pass_variance(events: Sequence[OpEvent], target: OpEvent) -> tuple[OpEvent, OpEvent] | None:
    """(the subtraction, the mean of squares) when `target`'s first input is a variance
    computed in one pass, E[x^2] - E[x]^2: upstream through `var + eps`, a clamp or a
    view, a `Sub` whose first operand is the mean of the squares of a tensor and whose
    second is the square of the mean of the same tensor. In floating point the two terms
    cancel: for values far from 0 their difference is rounding, and can be negative,
    which no variance is. None otherwise."""
    made = _maker_through_views(_producers_before(events, target))
    current = made(target.input_ids[0]) if target.input_ids else None
    for _ in range(_VARIANCE_STEPS):
        if current is None or current.op_type == "Sub" or current.op_type not in _CARRY_VARIANCE:
            break
        current = made(current.input_ids[0]) if current.input_ids else None
    if current is None or current.op_type != "Sub" or len(current.input_ids) != 2:
        return None
    mean_of_squares, square_of_mean = (made(tensor) for tensor in current.input_ids)
    squared = _squared(mean_of_squares, made, outer=_MEANS)
    meaned = _squared(square_of_mean, made, inner=_MEANS)
    if squared is None or meaned is None or squared != meaned:
        return None
    return current, mean_of_squares


def _squared(event, made, outer=frozenset(), inner=frozenset()) -> int | None:
    """The tensor a mean of squares (`outer` = means) or a square of a mean (`inner` =
    means) is taken of; None when `event` is neither."""
    if event is None:
        return None
    if outer:
        if event.op_type not in outer or not event.input_ids:
            return None
        event = made(event.input_ids[0])
        if event is None:
            return None
    base = _square_base(event)
    if base is None:
        return None
    if inner:
        mean = made(base)
        if mean is None or mean.op_type not in inner or not mean.input_ids:
            return None
        return mean.input_ids[0]
    return base


def _square_base(event: OpEvent) -> int | None:
    """The tensor `event` squares: Square(x), x * x, x ** 2 (a second input of 2, or
    none: PyTorch's scalar exponent); None for any other op."""
    if event.op_type not in _SQUARES or not event.input_ids:
        return None
    if event.op_type == "Square":
        return event.input_ids[0]
    if event.op_type == "Mul":
        first, *rest = event.input_ids
        return first if rest == [first] else None
    if len(event.input_ids) == 1:
        return event.input_ids[0]
    exponent = event.input_values[1] if len(event.input_values) > 1 else ()
    return event.input_ids[0] if tuple(exponent)[:1] == (2.0,) else None


def _maker_through_views(producers: dict[int, OpEvent]):
    """A function giving the op that made a tensor, looking through views of it."""

    def made(tensor: int) -> OpEvent | None:
        producer = producers.get(tensor)
        while producer is not None and producer.op_type in VIEW_OPS and producer.input_ids:
            producer = producers.get(producer.input_ids[0])
        return producer

    return made


def _producers_before(events: Sequence[OpEvent], target: OpEvent) -> dict[int, OpEvent]:
    """Tensor id -> the event that wrote it, among the events that ran before `target`."""
    return {output: event for event in events[: target.index] for output in event.output_ids}


# Ops that add their inputs: a variable they read only shifts the values (a bias).
ADDITIONS = frozenset({"Add", "AddV2", "BiasAdd", "AddN"})
# Ops that pick values from one of two branches (a `where`): a non-finite value in the
# branch not taken does not reach their output, but still poisons the gradient.
SELECT_OPS = frozenset({"Select", "SelectV2"})
# Arithmetic whose NaN is its own when one input's only non-finite values are -inf a
# fill wrote on purpose (a mask): -inf - -inf (scores normalised by the log-sum-exp of a
# row masked everywhere), 0 * -inf (a masked entry's log-probability times its
# probability 0). The same -inf from a log of 0 explains the NaN: the walk goes on to it.
MEETS_A_MASK = frozenset({"Sub", "Mul"})
# Ops that write a constant where a condition holds (a mask's -inf).
FILLS = SELECT_OPS | frozenset({"MaskedFill", "Fill", "Full", "FullLike"})
# Ops that sum entries (a softmax's normaliser; the sum inside a logsumexp).
_SUMS = frozenset({"Sum", "UnsortedSegmentSum", "SegmentSum", "SparseSegmentSum", "ScatterAdd"})
# Ops a summed value passes through on its way to a log, unchanged but for its shape or
# a small constant added (`log(sum + 1e-9)`).
_ON_THE_WAY = VIEW_OPS | {"Cast", "AddV2", "Add"}
_LOGS = frozenset({"Log", "Log1p"})
# Ops an exp's values pass through on their way to the sum: those above, and a product
# (a mask that leaves out the diagonal, `exp(sim) * (1 - eye)`, or weights): still a sum
# of exps under the log, where a max-shift must be added back.
_EXP_ON_THE_WAY = _ON_THE_WAY | {"Mul"}


def log_of_sum(events: Sequence[OpEvent], origin: OpEvent) -> OpEvent | None:
    """The log that reads a sum of `origin`'s output (log(sum(exp(x))) written out,
    on one line or over several), or None.

    A max-shift of an exp cancels in a ratio (a softmax), not under such a log: there
    the shift must be added back (that is logsumexp), or the result changes.
    """
    if origin.phase != "forward" or not origin.output_ids:
        return None
    exps, sums = {origin.output_ids[0]}, set()
    for event in events[origin.index + 1 :]:
        if event.phase != "forward":
            continue
        read = set(event.input_ids)
        if event.op_type in _LOGS and read & sums:
            return event
        if event.op_type in _SUMS and read & exps:
            sums.update(event.output_ids)
        elif event.op_type in _ON_THE_WAY and read & sums:
            sums.update(event.output_ids)
        elif event.op_type in _EXP_ON_THE_WAY and read & exps:
            exps.update(event.output_ids)
    return None
