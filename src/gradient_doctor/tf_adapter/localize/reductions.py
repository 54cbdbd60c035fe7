"""Find the op of a replayed step that sums an op's output next, and what groups it sums over."""

from __future__ import annotations

import ast
import linecache
from dataclasses import replace

import numpy as np

from gradient_doctor.core.evidence import Reduction
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.source.calls import Call, find_call, matching_close
from gradient_doctor.core.op_trace import OpEvent

# Reductions along axes (their second input), whose axis a max-shift must respect.
AXIS_REDUCTIONS = frozenset({"Sum", "Mean", "Max", "Prod"})
# op type -> (kind, index of the input summed): reductions over segments of the entries.
_SEGMENT_REDUCTIONS = {
    "UnsortedSegmentSum": ("segment", 0),
    "SegmentSum": ("sorted_segment", 0),
    "TensorScatterAdd": ("scatter", 2),
    "ScatterNd": ("scatter", 1),
}
# The user's calls that make those ops. A ragged tensor's `reduce_sum` is an
# UnsortedSegmentSum made by a call along an axis.
_SEGMENT_CALLS = (
    "unsorted_segment_sum",
    "unsorted_segment_mean",
    "unsorted_segment_sqrt_n",
    "segment_sum",
    "segment_mean",
    "tensor_scatter_nd_add",
    "scatter_nd",
)
_AXIS_CALLS = ("reduce_sum", "reduce_mean", "sum", "mean")
# Ops whose output holds the same entries, in the same places, as the input followed
# (times a mask, or picked by a `where`); the sum after them still normalises it.
_PASSING = frozenset({"Mul", "Identity", "Cast", "Select", "SelectV2"})
_LONGEST_STATEMENT = 8  # lines read to close the brackets of a call split over lines


def find_reduction(events: list[OpEvent], origin: OpEvent, tensors: dict) -> Reduction | None:
    """The reduction that sums `origin`'s output next, as the replay ran it.

    A reduction of the output itself (or of the same op's output for the same input,
    as in `exp(s) / sum(exp(s))`) is preferred; else one reached through a mask
    (`exp(s) * mask`, `tf.where(keep, exp(s), 0.0)`) that leaves its shape alone.

    Args:
        events: the replayed step's trace.
        origin: the op whose output is followed (a hand-written softmax's exp).
        tensors: tensor id -> value, for the axes, the indices and the masks.

    Returns:
        The `Reduction`, or None when no reduction of the output was seen, or its
        groups could not be read (a segment sum whose call is not on the user's line).
    """
    if not origin.outputs:
        return None
    shape = origin.outputs[0].shape
    followed = {origin.output_ids[0]: None}  # tensor id -> (mask text, is condition)
    through_mask = None
    for event in events[origin.index + 1 :]:
        if event.phase != "forward":
            continue
        if (event.op_type, event.input_ids) == (origin.op_type, origin.input_ids):
            # The same op of the same input computes the same values: the exp inside
            # `exp(s) / sum(exp(s))` that the sum reads.
            followed[event.output_ids[0]] = None
            continue
        found = _reduction_of(event, followed, tensors, shape)
        if found is not None:
            if found.mask is None:
                return found
            through_mask = through_mask or found
            continue
        for index, tensor in enumerate(event.input_ids):
            if tensor in followed and _passes(event, index, shape):
                mask = followed[tensor] or _mask_of(event, index, tensors)
                followed.update(dict.fromkeys(event.output_ids, mask))
                break
    return through_mask


def _reduction_of(event: OpEvent, followed: dict, tensors: dict, shape) -> Reduction | None:
    """`event` as the reduction of a followed tensor, or None when it is not one."""
    if event.op_type in AXIS_REDUCTIONS:
        summed = event.input_ids[0] if event.input_ids else None
        if summed not in followed or _shape(event, 0) != shape or len(event.input_ids) < 2:
            return None
        axes = np.asarray(tensors[event.input_ids[1]]).ravel()
        if axes.size != 1:
            return None
        reduction = Reduction("axis", event.op_type, axis=int(axes[0]), source=event.source)
        return _with_mask(reduction, followed[summed], _call(event.source, _AXIS_CALLS))
    kind, index = _SEGMENT_REDUCTIONS.get(event.op_type, (None, None))
    if kind is None or index >= len(event.input_ids):
        return None
    summed = event.input_ids[index]
    if summed not in followed or _shape(event, index) != shape:
        return None
    call = _call(event.source, _SEGMENT_CALLS + _AXIS_CALLS)
    if call is None:
        return None
    if call.name in _AXIS_CALLS:  # a ragged tensor's reduction, along the axis it names
        axis = _literal_int(call.argument(1, "axis"))
        reduction = Reduction("axis", event.op_type, axis=axis, source=event.source)
        return _with_mask(reduction, followed[summed], call) if axis is not None else None
    groups = _segment_groups(kind, call, event, tensors)
    if groups is None:
        return None
    kind, segment_ids, num_segments = groups
    reduction = Reduction(
        kind,
        event.op_type,
        function=call.prefix + call.name,
        segment_ids=segment_ids,
        num_segments=num_segments,
        source=event.source,
    )
    return _with_mask(reduction, followed[summed], call)


def _with_mask(reduction: Reduction, mask: tuple[str, bool] | None, call: Call | None) -> Reduction:
    """`reduction` with the mask met on the way and the user's spelling of its call."""
    text, condition = mask if mask is not None else (None, False)
    function = reduction.function or (call.prefix + call.name if call is not None else None)
    return replace(reduction, function=function, mask=text, mask_is_condition=condition)


def _segment_groups(
    kind: str, call: Call, event: OpEvent, tensors: dict
) -> tuple[str, str, str | None] | None:
    """(kind, segment ids, count) as the user's text, or None when unreadable.

    A scatter-add of one index per entry (indices of shape [n, 1]) sums segments
    too: the ids are the indices' only column, the count the target's first dimension.
    """
    if kind != "scatter":
        ids = call.argument(1, "segment_ids")
        count = call.argument(2, "num_segments") if kind == "segment" else None
        return (kind, ids, count) if ids is not None else None
    if event.op_type == "TensorScatterAdd":
        indices, target = call.argument(1, "indices"), call.argument(0, "tensor")
        count = _length(target) if target is not None else None
        index_shape = np.shape(tensors[event.input_ids[1]])
    else:
        indices, shape = call.argument(0, "indices"), call.argument(2, "shape")
        count = (_first_element(shape) or f"{shape}[0]") if shape is not None else None
        index_shape = np.shape(tensors[event.input_ids[0]])
    if indices is None or count is None or len(index_shape) != 2 or index_shape[1] != 1:
        return None
    return "segment", _only_column(indices), count


def _passes(event: OpEvent, index: int, shape) -> bool:
    """Whether the followed input `index` of `event` reaches its output entry for entry."""
    if event.op_type not in _PASSING or not event.outputs or event.outputs[0].shape != shape:
        return False
    # A where passes the branch it picks where its condition holds, not the other.
    return event.op_type not in ("Select", "SelectV2") or index == 1


def _mask_of(event: OpEvent, index: int, tensors: dict) -> tuple[str, bool] | None:
    """The user's text of the mask `event` applies to its input `index`, or None.

    A product with a tensor that holds zeros masks those entries; the condition of
    a `where` keeps the entries where it holds. A product with a scalar or with no
    zero masks nothing.
    """
    if event.op_type == "Mul" and len(event.input_ids) == 2:
        other = event.input_ids[1 - index]
        values = np.asarray(tensors.get(other, 0.0))
        if values.size <= 1 or np.all(values != 0):
            return None
        text = _operand_text(event.source, 1 - index)
        return (text, False) if text is not None else None
    if event.op_type in ("Select", "SelectV2"):
        call = _call(event.source, ("where",))
        condition = call.argument(0, "condition") if call is not None else None
        return (condition, True) if condition is not None else None
    return None


def _operand_text(source: SourceLine | None, position: int) -> str | None:
    """The user's text of operand `position` of the product that made an op.

    Read from the expression at the op's span (`a * b`, `tf.multiply(a, b)`,
    `x *= m`), else from the line's only product.
    """
    if source is None:
        return None
    code = source.code
    pieces = [code[slice(*source.span)]] if source.span is not None else []
    for text in [*pieces, code]:
        operands = _product_operands(text)
        if operands is not None:
            return operands[position]
    return None


def _product_operands(text: str) -> tuple[str, str] | None:
    """The two operands of the only product in `text`, as written; None when not one."""
    source = text.strip()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    pairs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            pairs.append((node.left, node.right))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult):
            pairs.append((node.target, node.value))
        elif (
            isinstance(node, ast.Call) and _called_name(node) == "multiply" and len(node.args) == 2
        ):
            pairs.append((node.args[0], node.args[1]))
    if len(pairs) != 1:
        return None
    left, right = (ast.get_source_segment(source, node) for node in pairs[0])
    return (left, right) if left is not None and right is not None else None


def _called_name(node: ast.Call) -> str | None:
    function = node.func
    return function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)


def _call(source: SourceLine | None, names: tuple[str, ...]) -> Call | None:
    """The user's call of one of `names` that made an op: the one at its span, or the
    first on its statement when the call is split over several lines."""
    if source is None:
        return None
    call = find_call(source.code, names, source.span)
    if call is not None or source.span is not None:
        return call
    return find_call(_statement(source), names)


def _statement(source: SourceLine) -> str:
    """The op's line joined with the lines that close its brackets (a call split over lines)."""
    text = source.code
    for number in range(source.line + 1, source.line + _LONGEST_STATEMENT):
        opening = text.find("(")
        if opening < 0 or matching_close(text, opening) is not None:
            break
        text += " " + linecache.getline(source.file, number).strip()
    return text


def _shape(event: OpEvent, index: int):
    return event.inputs[index].shape if index < len(event.inputs) else None


def _literal_int(text: str | None) -> int | None:
    """The int a literal such as "1" or "-1" stands for, else None."""
    try:
        value = ast.literal_eval(text) if text is not None else None
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _only_column(indices: str) -> str:
    """The text of the ids whose column `indices` is: `ids` for `ids[:, None]`."""
    try:
        node = ast.parse(indices, mode="eval").body
    except SyntaxError:
        return f"{indices}[:, 0]"
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
        parts = node.slice.elts
        if (
            len(parts) == 2
            and isinstance(parts[0], ast.Slice)
            and isinstance(parts[1], ast.Constant)
            and parts[1].value is None
        ):
            return ast.get_source_segment(indices, node.value) or f"{indices}[:, 0]"
    return f"{indices}[:, 0]"


def _length(target: str) -> str:
    """The text of the first dimension of the tensor `target` scatters into: `n` for
    `tf.zeros([n])` or `tf.zeros((n, d))`, else `tf.shape(target)[0]`."""
    made = find_call(target, ("zeros", "ones", "fill"))
    whole = made is not None and made.start == 0 and made.end == len(target.strip())
    first = _first_element(made.args[0]) if whole and made.args else None
    return first if first is not None else f"tf.shape({target})[0]"


def _first_element(shape: str) -> str | None:
    """The text of the first element of a list or tuple literal (`n` for `[n, d]`), or None."""
    try:
        node = ast.parse(shape, mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.List | ast.Tuple) and node.elts:
        return ast.get_source_segment(shape, node.elts[0])
    return None
