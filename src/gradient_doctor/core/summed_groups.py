"""Find the op that sums an op's output next: one walk, read each framework's way by its adapter.

A hand-written softmax's max-shift must be constant over each group its normaliser
sums: one slice along the summed axis, or one segment of a segment sum. The walk
follows the exp's output forward, through the ops that keep its entries in place (a
mask, a cast), to the first reduction of it. What only the framework knows, the
adapter's `ReductionReader` reads: which ops reduce along axes and where their axis
is (PyTorch's events carry it, TensorFlow's reductions take it as a tensor), how a
segment sum's groups are spelled on the user's line, whether a product's other
operand holds zeros (a mask), and a mask made before the exp.
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Protocol

from gradient_doctor.core.evidence import Reduction
from gradient_doctor.core.knowledge.source.reduction_text import (
    product_operand,
    spelled,
    user_call,
)
from gradient_doctor.core.op_trace import SELECT_OPS, OpEvent

# A mask met on the way to the sum: the user's text of it, and whether it is a
# condition (the entries it keeps are where it holds) rather than a multiplier.
Mask = tuple[str, bool]


class ReductionReader(Protocol):
    """What the walk to a softmax's normaliser reads the framework's own way.

    An adapter subclasses it explicitly to inherit the defaults (no fill masks, no
    mask made before the origin).

    Attributes:
        axis_reductions: the op types that reduce along axes (`Sum`, `Mean`).
        axis_calls: the names of the user's calls that make them (`reduce_sum`),
            for the reduction's spelling.
        segment_sums: op type -> the index of its input that is summed into segments.
        passing: the op types whose output holds the followed input's entries in the
            same places (a product with a mask, a `where` that keeps them, a cast).
            A select passes only its input 1 (the branch it takes where its
            condition holds), a `MaskedFill` only its input 0.
    """

    axis_reductions: frozenset[str]
    axis_calls: tuple[str, ...]
    segment_sums: Mapping[str, int]
    passing: frozenset[str]

    @abstractmethod
    def axis(self, event: OpEvent) -> int | None:
        """The one axis an axis reduction `event` sums along; None for several, or unread."""

    @abstractmethod
    def segments(self, event: OpEvent) -> Reduction | None:
        """A segment sum `event` as a `Reduction` (its groups as the user's text, from
        the event and the user's call; no mask), or None when its call is unreadable."""

    @abstractmethod
    def holds_zeros(self, event: OpEvent, index: int) -> bool:
        """Whether input `index` of the product `event` is a tensor (not a scalar) that
        holds zeros: a mask of the entries of its other operand."""

    def fill_mask(self, event: OpEvent) -> Mask | None:
        """The condition whose entries a `MaskedFill` `event` keeps, or None."""
        return None

    def mask_before(self, events: Sequence[OpEvent], origin: OpEvent) -> Mask | None:
        """A mask made on `origin`'s input before it ran (`masked_fill(drop, -inf)`
        before the exp: the kept entries' condition), or None."""
        return None


def find_reduction(
    events: Sequence[OpEvent], origin: OpEvent, reader: ReductionReader
) -> Reduction | None:
    """The reduction that sums `origin`'s output next, as the replay ran it.

    A reduction of the output itself (or of the same op's output for the same input,
    as in `exp(s) / sum(exp(s))`) is preferred; else one reached through a mask
    (`exp(s) * mask`, `where(keep, exp(s), 0.0)`) that leaves its shape alone. A mask
    made before the origin (`reader.mask_before`) is the unmasked reduction's mask.

    Args:
        events: the replayed step's trace.
        origin: the op whose output is followed (a hand-written softmax's exp).
        reader: the adapter's reader of its framework's reductions and masks.

    Returns:
        The `Reduction`, or None for a backward origin, when no reduction of the
        output over one axis was seen, or its groups could not be read (a segment
        sum whose call is not on the user's line).
    """
    if origin.phase != "forward" or not origin.outputs or not origin.output_ids:
        return None
    shape = origin.outputs[0].shape
    followed: dict[int, Mask | None] = {origin.output_ids[0]: None}
    before = reader.mask_before(events, origin)
    through_mask = None
    for event in events[origin.index + 1 :]:
        if event.phase != "forward" or not event.output_ids:
            continue
        if (event.op_type, event.input_ids) == (origin.op_type, origin.input_ids):
            # The same op of the same input computes the same values: the exp inside
            # `exp(s) / sum(exp(s))` that the sum reads.
            followed[event.output_ids[0]] = None
            continue
        found = _reduction_of(event, followed, shape, reader)
        if found is not None:
            if found.mask is None:
                return _masked(found, before)
            through_mask = through_mask or found
            continue
        for index, tensor in enumerate(event.input_ids):
            if tensor in followed and _passes(event, index, shape, reader):
                mask = followed[tensor] or _mask_of(event, index, reader)
                followed.update(dict.fromkeys(event.output_ids, mask))
                break
    return through_mask


def _reduction_of(
    event: OpEvent, followed: dict[int, Mask | None], shape, reader: ReductionReader
) -> Reduction | None:
    """`event` as the reduction of a followed tensor, or None when it is not one."""
    if event.op_type in reader.axis_reductions:
        summed = event.input_ids[0] if event.input_ids else None
        if summed not in followed or _shape(event, 0) != shape:
            return None
        axis = reader.axis(event)
        if axis is None:
            return None
        reduction = Reduction(
            "axis",
            event.op_type,
            axis=axis,
            function=spelled(user_call(event.source, reader.axis_calls)),
            source=event.source,
        )
        return _masked(reduction, followed[summed])
    index = reader.segment_sums.get(event.op_type)
    if index is None or index >= len(event.input_ids):
        return None
    summed = event.input_ids[index]
    if summed not in followed or _shape(event, index) != shape:
        return None
    reduction = reader.segments(event)
    return _masked(reduction, followed[summed]) if reduction is not None else None


def _masked(reduction: Reduction, mask: Mask | None) -> Reduction:
    """`reduction` reached through `mask`."""
    if mask is None:
        return reduction
    text, condition = mask
    return dataclasses.replace(reduction, mask=text, mask_is_condition=condition)


def _passes(event: OpEvent, index: int, shape, reader: ReductionReader) -> bool:
    """Whether the followed input `index` of `event` reaches its output entry for entry."""
    if event.op_type not in reader.passing or not event.outputs:
        return False
    if event.outputs[0].shape != shape:
        return False
    if event.op_type in SELECT_OPS:  # the branch a where takes where its condition holds
        return index == 1
    return event.op_type != "MaskedFill" or index == 0


def _mask_of(event: OpEvent, index: int, reader: ReductionReader) -> Mask | None:
    """The user's text of the mask `event` puts on its input `index`, or None.

    A product with a tensor that holds zeros masks those entries (a product with a
    scalar or with no zero masks nothing); `where(keep, e, 0)` keeps the entries
    where `keep` holds; a masked fill keeps those its reader says.
    """
    if event.op_type == "Mul" and len(event.input_ids) == 2:
        if not reader.holds_zeros(event, 1 - index):
            return None
        text = product_operand(event.source, 1 - index)
        return (text, False) if text is not None else None
    if event.op_type in SELECT_OPS:
        call = user_call(event.source, ("where",))
        condition = call.argument(0, "condition") if call is not None else None
        return (condition, True) if condition is not None else None
    if event.op_type == "MaskedFill":
        return reader.fill_mask(event)
    return None


def _shape(event: OpEvent, index: int):
    return event.inputs[index].shape if index < len(event.inputs) else None
