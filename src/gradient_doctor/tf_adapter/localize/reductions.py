"""TensorFlow's reader of the op summing a softmax's exp: axes, indices and masks from values.

TensorFlow's reductions take their axes as an input tensor, and its segment sums
(`unsorted_segment_sum`, `segment_sum`, `tensor_scatter_nd_add`, `scatter_nd`) their
groups as index tensors: the walk (`core/summed_groups.py`) reads them, and whether
a product's operand holds zeros, from the replay's tensor values, and the user's
spelling of the groups from the call that made the op (split over lines too).
"""

from __future__ import annotations

import ast

import numpy as np

from gradient_doctor.core.evidence import Reduction
from gradient_doctor.core.knowledge.source.calls import Call
from gradient_doctor.core.knowledge.source.reduction_text import (
    first_element,
    first_size,
    spelled,
    user_call,
)
from gradient_doctor.core.op_trace import OpEvent
from gradient_doctor.core.summed_groups import ReductionReader

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


class TensorflowReductions(ReductionReader):
    """The reductions and masks of a replayed TensorFlow step, as the walk reads them.

    Args:
        tensors: tensor id -> value, for the axes, the indices and the masks.
    """

    axis_reductions = AXIS_REDUCTIONS
    axis_calls = _AXIS_CALLS
    segment_sums = {op: index for op, (_, index) in _SEGMENT_REDUCTIONS.items()}
    # Ops whose output holds the same entries, in the same places, as the input
    # followed (times a mask, or picked by a `where`); the sum after them still
    # normalises it.
    passing = frozenset({"Mul", "Identity", "Cast", "Select", "SelectV2"})

    def __init__(self, tensors: dict) -> None:
        self.tensors = tensors

    def axis(self, event: OpEvent) -> int | None:
        if len(event.input_ids) < 2:
            return None
        axes = np.asarray(self.tensors[event.input_ids[1]]).ravel()
        return int(axes[0]) if axes.size == 1 else None

    def segments(self, event: OpEvent) -> Reduction | None:
        """The groups as the user's call names them; a ragged tensor's `reduce_sum` (an
        UnsortedSegmentSum) as a reduction along the axis its call names."""
        call = user_call(event.source, _SEGMENT_CALLS + _AXIS_CALLS)
        if call is None:
            return None
        if call.name in _AXIS_CALLS:
            axis = _literal_int(call.argument(1, "axis"))
            if axis is None:
                return None
            return Reduction(
                "axis", event.op_type, axis=axis, function=spelled(call), source=event.source
            )
        groups = _segment_groups(_SEGMENT_REDUCTIONS[event.op_type][0], call, event, self.tensors)
        if groups is None:
            return None
        kind, segment_ids, num_segments = groups
        return Reduction(
            kind,
            event.op_type,
            function=spelled(call),
            segment_ids=segment_ids,
            num_segments=num_segments,
            source=event.source,
        )

    def holds_zeros(self, event: OpEvent, index: int) -> bool:
        values = np.asarray(self.tensors.get(event.input_ids[index], 0.0))
        return values.size > 1 and not np.all(values != 0)


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
        count = (first_element(shape) or f"{shape}[0]") if shape is not None else None
        index_shape = np.shape(tensors[event.input_ids[0]])
    if indices is None or count is None or len(index_shape) != 2 or index_shape[1] != 1:
        return None
    return "segment", _only_column(indices), count


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
    first = first_size(target, ("zeros", "ones", "fill"), scalar_sizes=False)
    return first if first is not None else f"tf.shape({target})[0]"
