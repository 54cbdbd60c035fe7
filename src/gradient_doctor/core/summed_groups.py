"""Find the op that sums an op's output next, from events that carry their own axes (PyTorch's).

A hand-written softmax's max-shift must be constant over each group its normaliser
sums: one slice along the summed dim, or one segment of an `index_add_` /
`scatter_add` sum. PyTorch's reductions take their dims as arguments, which the
adapter's recorder writes into each event (`OpEvent.axes`), so the walk needs no
tensor values: the user's spelling of the segment ids and of a mask is read from the
lines that made the ops. (TensorFlow's reductions read their axes from an input
tensor: its adapter finds them its own way.)
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence

from gradient_doctor.core.evidence import Reduction
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.source.calls import find_call
from gradient_doctor.core.op_trace import OpEvent

# Reductions along dims that normalise a softmax.
_AXIS_REDUCTIONS = frozenset({"Sum", "Mean"})
# Sums of entries into segments: input 2 (the source) is summed into the slots input 1
# (the index) names, along the event's one axis.
_SEGMENT_SUMS = frozenset({"ScatterAdd"})
_SEGMENT_CALLS = ("index_add_", "index_add", "scatter_add_", "scatter_add")
# Ops whose output holds the followed input's entries in the same places (a product
# with a mask, a `where` that keeps them, a `masked_fill` of the others, a cast).
_PASSING = frozenset({"Mul", "Select", "MaskedFill", "Cast", "Clone", "Contiguous"})
_MINUS_INF_TEXTS = ('float("-inf")', "float('-inf')", "-float('inf')", '-float("inf")')


def find_reduction(events: Sequence[OpEvent], origin: OpEvent) -> Reduction | None:
    """The reduction that sums `origin`'s output next, when the events carry their axes.

    An unmasked reduction of the output (or of the same op's output of the same input,
    as in `exp(s) / exp(s).sum(-1, keepdim=True)`) is preferred; else one reached
    through a mask. A `masked_fill(~keep, -inf)` of the origin's input is its mask too.

    Args:
        events: the replayed step's trace.
        origin: the op whose output is followed (a hand-written softmax's exp).

    Returns:
        The `Reduction`, or None when no event carries its axes, no reduction of the
        output over one dim was seen, or a segment sum's call could not be read.
    """
    if origin.phase != "forward" or not origin.outputs or not origin.output_ids:
        return None
    if not any(event.axes is not None for event in events):
        return None
    shape = origin.outputs[0].shape
    followed: dict[int, tuple[str, bool] | None] = {origin.output_ids[0]: None}
    filled = _filled_mask(events, origin)
    through_mask = None
    for event in events[origin.index + 1 :]:
        if event.phase != "forward" or not event.output_ids:
            continue
        if (event.op_type, event.input_ids) == (origin.op_type, origin.input_ids):
            followed[event.output_ids[0]] = None
            continue
        found = _reduction_of(event, followed, shape)
        if found is not None:
            if filled is not None and found.mask is None:
                return _masked(found, filled)
            if found.mask is None:
                return found
            through_mask = through_mask or found
            continue
        for index, tensor in enumerate(event.input_ids):
            if tensor in followed and _passes(event, index, shape):
                mask = followed[tensor] or _mask_of(event, index)
                followed.update(dict.fromkeys(event.output_ids, mask))
                break
    return through_mask


def _reduction_of(
    event: OpEvent, followed: dict[int, tuple[str, bool] | None], shape
) -> Reduction | None:
    """`event` as the reduction of a followed tensor over one dim, or None."""
    if event.axes is None or len(event.axes) != 1:
        return None
    if event.op_type in _AXIS_REDUCTIONS:
        summed = event.input_ids[0] if event.input_ids else None
        if summed not in followed or event.inputs[0].shape != shape:
            return None
        call = _call(event.source, ("sum", "mean", "nansum", "nanmean"))
        reduction = Reduction(
            "axis",
            event.op_type,
            axis=event.axes[0],
            function=call.prefix + call.name if call is not None else None,
            source=event.source,
        )
        return _masked(reduction, followed[summed])
    if event.op_type not in _SEGMENT_SUMS or len(event.input_ids) < 3 or event.axes != (0,):
        return None
    summed = event.input_ids[2]
    if summed not in followed or event.inputs[2].shape != shape:
        return None
    groups = _segment_call(event.source)
    if groups is None:
        return None
    function, ids, count = groups
    reduction = Reduction(
        "segment",
        event.op_type,
        axis=0,
        function=function,
        segment_ids=ids,
        num_segments=count,
        source=event.source,
    )
    return _masked(reduction, followed[summed])


def _masked(reduction: Reduction, mask: tuple[str, bool] | None) -> Reduction:
    """`reduction` reached through `mask` (its text, and whether it is a condition)."""
    if mask is None:
        return reduction
    text, condition = mask
    return dataclasses.replace(reduction, mask=text, mask_is_condition=condition)


def _passes(event: OpEvent, index: int, shape) -> bool:
    """Whether the followed input `index` of `event` reaches its output entry for entry."""
    if event.op_type not in _PASSING or not event.outputs or event.outputs[0].shape != shape:
        return False
    if event.op_type == "Select":  # a where passes the branch it takes where its condition holds
        return index == 1
    return event.op_type != "MaskedFill" or index == 0


def _mask_of(event: OpEvent, index: int) -> tuple[str, bool] | None:
    """The user's text of the mask `event` puts on its input `index`, or None.

    A product with a tensor that holds zeros masks those entries; `where(keep, e, 0)`
    keeps the entries where `keep` holds; `e.masked_fill(drop, 0)` keeps the others.
    """
    if event.op_type == "Mul" and len(event.inputs) == 2:
        other = event.inputs[1 - index]
        if other.size <= 1 or other.zeros == 0:
            return None
        text = _product_operand(event.source, 1 - index)
        return (text, False) if text is not None else None
    if event.op_type == "Select":
        call = _call(event.source, ("where",))
        condition = call.argument(0, "condition") if call is not None else None
        return (condition, True) if condition is not None else None
    if event.op_type == "MaskedFill":
        dropped = _fill_condition(event.source)
        return (_negated(dropped), True) if dropped is not None else None
    return None


def _filled_mask(events: Sequence[OpEvent], origin: OpEvent) -> tuple[str, bool] | None:
    """The kept entries' condition when the origin's input was made by a
    `masked_fill(drop, -inf)` (an attention mask written before exp), else None."""
    if not origin.input_ids:
        return None
    made = next((e for e in events[: origin.index] if origin.input_ids[0] in e.output_ids), None)
    if made is None or made.op_type != "MaskedFill" or made.source is None:
        return None
    call = _call(made.source, ("masked_fill", "masked_fill_"))
    value = call.argument(1, "value") if call is not None else None
    if value is None or value.replace(" ", "") not in {
        t.replace(" ", "") for t in _MINUS_INF_TEXTS
    }:
        return None
    dropped = call.argument(0, "mask")
    return (_negated(dropped), True) if dropped is not None else None


def _fill_condition(source: SourceLine | None) -> str | None:
    call = _call(source, ("masked_fill", "masked_fill_"))
    return call.argument(0, "mask") if call is not None else None


def _negated(condition: str) -> str:
    """The condition that holds where `condition` does not: `m` for `~m`, else `~(c)`."""
    text = condition.strip()
    if text.startswith("~"):
        inner = text[1:].strip()
        if inner.isidentifier():
            return inner
    return f"~{text}" if text.isidentifier() else f"~({text})"


def _call(source: SourceLine | None, names: tuple[str, ...]):
    return find_call(source.code, names, source.span) if source is not None else None


def _product_operand(source: SourceLine | None, position: int) -> str | None:
    """The user's text of operand `position` of the line's only product (`e * mask`)."""
    if source is None:
        return None
    tree = _parsed(source.code)
    pairs = [
        (node.left, node.right)
        for node in ast.walk(tree or ast.Module(body=[], type_ignores=[]))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
    ]
    if len(pairs) != 1:
        return None
    return ast.get_source_segment(source.code.strip(), pairs[0][position])


def _segment_call(source: SourceLine | None) -> tuple[str, str, str | None] | None:
    """(the call's name, the segment ids' text, the count's text or None) of the line's
    `index_add_` / `scatter_add` along dim 0: the ids are its index; the count is the
    first size of the target it sums into when a constructor makes it there
    (`torch.zeros(n)`, `x.new_zeros(n, d)`), else None."""
    if source is None:
        return None
    code = source.code.strip()
    for node in ast.walk(_parsed(code) or ast.Module(body=[], type_ignores=[])):
        if not isinstance(node, ast.Call) or _name(node.func) not in _SEGMENT_CALLS:
            continue
        method = isinstance(node.func, ast.Attribute) and _name(node.func.value) != "torch"
        args = list(node.args)
        target = node.func.value if method else (args.pop(0) if args else None)
        keywords = {k.arg: k.value for k in node.keywords}
        index = args[1] if len(args) > 1 else keywords.get("index")
        if index is None or target is None:
            return None
        name = _name(node.func)
        return name, ast.get_source_segment(code, index), _first_size(code, target)
    return None


def _first_size(code: str, target: ast.expr) -> str | None:
    """`n` for a target written `torch.zeros(n, ...)`, `torch.zeros((n, d))` or
    `x.new_zeros(n)`; None for anything else (a name: its size is not read here)."""
    if not isinstance(target, ast.Call) or not target.args:
        return None
    if _name(target.func) not in ("zeros", "ones", "empty", "new_zeros", "new_ones", "new_empty"):
        return None
    first = target.args[0]
    if isinstance(first, ast.Tuple | ast.List):
        first = first.elts[0] if first.elts else None
    return ast.get_source_segment(code, first) if first is not None else None


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _parsed(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except SyntaxError:
        return None
