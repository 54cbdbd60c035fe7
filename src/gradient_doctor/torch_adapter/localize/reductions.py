"""PyTorch's reader of the op summing a softmax's exp: axes from the events, masks from stats.

PyTorch's reductions take their dims as arguments, which the op recorder writes into
each event (`OpEvent.axes`), so the walk (`core/summed_groups.py`) needs no tensor
values: whether a product's operand holds zeros is in its input statistics, and the
user's spelling of the segment ids and of a mask is read from the lines that made
the ops.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from gradient_doctor.core.evidence import Reduction
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.source.reduction_text import first_size, negated, user_call
from gradient_doctor.core.knowledge.source.syntax_edit import callee, parse
from gradient_doctor.core.op_trace import OpEvent
from gradient_doctor.core.summed_groups import Mask, ReductionReader

# The user's calls that make a segment sum (a ScatterAdd along dim 0).
_SEGMENT_CALLS = ("index_add_", "index_add", "scatter_add_", "scatter_add")
# The constructors whose first size is the number of segments of the target they make.
_CONSTRUCTORS = ("zeros", "ones", "empty", "new_zeros", "new_ones", "new_empty")
_FILL_CALLS = ("masked_fill", "masked_fill_")
_MINUS_INF_TEXTS = frozenset({'float("-inf")', "float('-inf')", "-float('inf')", '-float("inf")'})


class TorchReductions(ReductionReader):
    """The reductions and masks of a recorded PyTorch step, as the walk reads them."""

    axis_reductions = frozenset({"Sum", "Mean"})
    axis_calls = ("sum", "mean", "nansum", "nanmean")
    # A ScatterAdd sums input 2 (the source) into the slots input 1 (the index) names.
    segment_sums = {"ScatterAdd": 2}
    passing = frozenset({"Mul", "Select", "MaskedFill", "Cast", "Clone", "Contiguous"})

    def axis(self, event: OpEvent) -> int | None:
        return event.axes[0] if event.axes is not None and len(event.axes) == 1 else None

    def segments(self, event: OpEvent) -> Reduction | None:
        """An `index_add_` / `scatter_add` along dim 0, read from the user's line."""
        groups = _segment_call(event.source) if event.axes == (0,) else None
        if groups is None:
            return None
        function, ids, count = groups
        return Reduction(
            "segment",
            event.op_type,
            axis=0,
            function=function,
            segment_ids=ids,
            num_segments=count,
            source=event.source,
        )

    def holds_zeros(self, event: OpEvent, index: int) -> bool:
        other = event.inputs[index]
        return other.size > 1 and other.zeros != 0

    def fill_mask(self, event: OpEvent) -> Mask | None:
        """`e.masked_fill(drop, 0)` keeps the entries where `drop` does not hold."""
        dropped = _fill_condition(event.source)
        return (negated(dropped), True) if dropped is not None else None

    def mask_before(self, events: Sequence[OpEvent], origin: OpEvent) -> Mask | None:
        """The kept entries' condition when the origin's input was made by a
        `masked_fill(drop, -inf)` (an attention mask written before exp), else None."""
        if not origin.input_ids:
            return None
        made = next(
            (e for e in events[: origin.index] if origin.input_ids[0] in e.output_ids), None
        )
        if made is None or made.op_type != "MaskedFill" or made.source is None:
            return None
        call = user_call(made.source, _FILL_CALLS)
        value = call.argument(1, "value") if call is not None else None
        if value is None or value.replace(" ", "") not in _MINUS_INF_TEXTS:
            return None
        dropped = call.argument(0, "mask")
        return (negated(dropped), True) if dropped is not None else None


def _fill_condition(source: SourceLine | None) -> str | None:
    call = user_call(source, _FILL_CALLS)
    return call.argument(0, "mask") if call is not None else None


def _segment_call(source: SourceLine | None) -> tuple[str, str, str | None] | None:
    """(the call's name, the segment ids' text, the count's text or None) of the line's
    `index_add_` / `scatter_add` along dim 0: the ids are its index; the count is the
    first size of the target it sums into when a constructor makes it there
    (`torch.zeros(n)`, `x.new_zeros(n, d)`), else None."""
    if source is None:
        return None
    code = source.code.strip()
    tree, _ = parse([code])
    for node in ast.walk(tree or ast.Module(body=[], type_ignores=[])):
        if not isinstance(node, ast.Call) or callee(node.func) not in _SEGMENT_CALLS:
            continue
        method = isinstance(node.func, ast.Attribute) and callee(node.func.value) != "torch"
        args = list(node.args)
        target = node.func.value if method else (args.pop(0) if args else None)
        keywords = {k.arg: k.value for k in node.keywords}
        index = args[1] if len(args) > 1 else keywords.get("index")
        if index is None or target is None:
            return None
        target_text = ast.get_source_segment(code, target) or ""
        count = first_size(target_text, _CONSTRUCTORS, scalar_sizes=True)
        return callee(node.func), ast.get_source_segment(code, index), count
    return None
