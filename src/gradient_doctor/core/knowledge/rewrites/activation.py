"""Rewrite the relu that made a value a log, root or division needs positive: softplus.

`var = tf.nn.relu(out[:, 1:])` feeds `tf.math.log(var)` and `/ var`: every unit the
relu shut off is an exact 0, where the log is -inf and the division inf. A guard at
the log leaves the division as it was; the value is meant to be positive, so the
line that makes it is the one to change: `(tf.nn.softplus(out[:, 1:]) + 1e-6)` is
positive everywhere (softplus alone underflows to 0 below about -100 in float32), and
every reader of `var` gets the same value. The call is the one the replay saw make
the input (its span on its line), spelled in the user's own namespace.
"""

from __future__ import annotations

import ast

from gradient_doctor.core.evidence import Evidence, OpCall
from gradient_doctor.core.findings import Edit, Fix, KeywordEdit
from gradient_doctor.core.knowledge.source.calls import find_call, find_method_call, replace_span

# Op types of activations that are exactly zero on half their inputs, and the calls that
# make them (a relu6 is left alone: softplus has no cap at 6).
ZERO_FLOOR_CALLS = {"Relu": ("relu",)}
# Op types of a clamp, which is a relu when its only bound is a lower one at 0
# (`tau.clamp(min=0.0)`, `torch.clamp_min(x, 0)`, `tf.maximum(x, 0.0)`), and its calls.
ZERO_CLAMP_CALLS = {
    "ClipByValue": ("clamp", "clip"),
    "Maximum": ("clamp_min", "maximum", "clamp", "clip"),
}
# Added to softplus's output: a floor that float32 cannot round to 0.
FLOOR = "1e-6"

TITLE = "Produce the value with softplus, which is always positive, instead of relu"
CLAMP_TITLE = (
    "Produce the value with softplus, which is always positive, instead of a clamp at 0 "
    "(which is exactly 0 for every value below, with no gradient there)"
)


def positive_activation(
    evidence: Evidence, argument: int, generic: Fix | None = None
) -> Fix | None:
    """An `activation_change` fix patching the line whose relu made the origin's input
    `argument`; `generic` when no such call is known."""
    producers = evidence.input_producers
    producer = producers[argument] if argument < len(producers) else None
    if producer is not None and _spans_lines(producer):
        layer = _layer_activation_keyword(producer)
        return generic if layer is None else layer
    edit = _softplus_edit(producer) if producer is not None else None
    if edit is None:
        return generic
    title = CLAMP_TITLE if producer.op in ZERO_CLAMP_CALLS else TITLE
    return Fix("activation_change", title, edit.new_lines[0], edits=(edit,))


def _spans_lines(producer: OpCall) -> bool:
    source = producer.source
    return source.end_line is not None and source.end_line > source.line


def _layer_activation_keyword(producer: OpCall) -> Fix | None:
    """For a library layer's relu built by a statement over several lines, the fix
    setting its `activation` keyword to softplus there (placed where the file is read);
    None for any other producer."""
    names = ZERO_FLOOR_CALLS.get(producer.op)
    if names is None or producer.source_kind != "layer_creation":
        return None
    source = producer.source
    change = KeywordEdit(source, "activation", names, '"softplus"')
    code = (
        f'activation="softplus"  # in place of activation="relu", in the layer built at '
        f"{source.file}:{source.line}"
    )
    return Fix("activation_change", TITLE, code, keyword_edits=(change,))


def _softplus_edit(producer: OpCall) -> Edit | None:
    """The edit of the producer's line replacing its relu call (or, for a library
    layer's relu, its `activation="relu"` where the layer was built), or None."""
    source = producer.source
    if producer.op in ZERO_CLAMP_CALLS and source.code and producer.source_kind == "op":
        return _zero_clamp_edit(producer)
    names = ZERO_FLOOR_CALLS.get(producer.op)
    if names is None or not source.code:
        return None
    if producer.source_kind == "layer_creation":
        return _layer_activation_edit(producer, names)
    if producer.source_kind != "op":
        return None
    code = source.code.strip()
    call = find_call(code, names, source.span)
    if call is None or len(call.args) != 1 or call.kwargs:
        return None  # relu(x, alpha=...) / max_value: not a plain relu
    softplus = f"({_softplus_name(call.prefix)}({call.args[0]}) + {FLOOR})"
    new = replace_span(code, call.start, call.end, softplus)
    return Edit(source.file, source.line, source.line, (new,), (code,))


def _zero_clamp_edit(producer: OpCall) -> Edit | None:
    """The edit of the producer's line replacing a clamp whose only bound is 0 below
    (a function's `clamp(x, min=0)`, `clamp_min(x, 0)`, `maximum(x, 0.0)`, or a
    tensor's `x.clamp(min=0.0)`, `x.clamp_min(0)`) by softplus, or None."""
    source = producer.source
    code = source.code.strip()
    names = ZERO_CLAMP_CALLS[producer.op]
    call = find_call(code, names, source.span)
    if call is not None and call.args:  # a function's call (`self.tau.clamp(` is a method's)
        value = call.args[0]
        start, end, prefix, rest = call.start, call.end, call.prefix, (call.args[1:], call.kwargs)
    else:
        method = find_method_call(code, names, source.span)
        if method is None:
            return None
        value, start, end, prefix = method.receiver, method.start, method.end, "torch."
        rest = (method.args, method.kwargs)
    if value is None or not _zero_lower_bound_only(*rest):
        return None
    softplus = f"({_softplus_name(prefix)}({value.strip()}) + {FLOOR})"
    new = replace_span(code, start, end, softplus)
    return Edit(source.file, source.line, source.line, (new,), (code,))


def _zero_lower_bound_only(args: tuple[str, ...], kwargs: tuple[tuple[str, str], ...]) -> bool:
    """Whether a clamp's bounds (after the value) are a lower bound of 0 and nothing else."""
    named = dict(kwargs)
    bounds = list(args) + [named.pop(key) for key in ("min", "clip_value_min") if key in named]
    if set(named) - {"max"} or named.get("max", "None").strip() != "None":
        return False
    if len(bounds) != 1:
        return False
    try:
        return float(bounds[0].strip()) == 0.0
    except ValueError:
        return False


def _layer_activation_edit(producer: OpCall, names: tuple[str, ...]) -> Edit | None:
    """The edit of a layer's creation line naming its activation softplus
    (`Dense(1, activation="relu")` -> `activation="softplus"`), or None when the line
    names no such activation as a string."""
    source = producer.source
    code = source.code.strip()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    named = [
        keyword.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg == "activation"
        and isinstance(keyword.value, ast.Constant)
        and keyword.value.value in names
    ]
    if len(named) != 1:
        return None
    value = named[0]
    quote = code[value.col_offset]
    start, end = value.col_offset, value.end_col_offset
    new = f"{code[:start]}{quote}softplus{quote}{code[end:]}"
    return Edit(source.file, source.line, source.line, (new,), (code,))


def _softplus_name(prefix: str) -> str:
    """softplus in the namespace the relu (or clamp) was called from; `torch.` and
    `tf.` have none of their own (`torch.nn.functional.softplus`, `tf.nn.softplus`)."""
    if prefix == "torch.":
        return "torch.nn.functional.softplus"
    if prefix == "tf.":
        return "tf.nn.softplus"
    return f"{prefix}softplus"


# Op types that make a learned value with no sign of its own: a layer's raw output (a
# matmul, its bias added, a constant shift or scale of it). A value a subtraction made
# is signed by design (a difference); one of these, fed to a root, is a positive
# quantity (a variance, a scale) predicted with nothing to keep it positive.
LEARNED_OUTPUTS = frozenset(
    {
        *("MatMul", "BatchMatMulV2", "Einsum", "BiasAdd", "AddV2", "Add", "Mul"),
        *("Conv1D", "Conv2D", "Conv3D"),
    }
)
POSITIVE_TITLE = (
    "Predict the value through softplus, which is always positive (a variance or scale "
    "head's usual parameterisation)"
)


def positive_output(evidence: Evidence, argument: int, framework: str) -> Fix | None:
    """An `activation_change` fix wrapping the assignment that made the origin's input
    `argument` (a layer's raw output) in softplus, or None when that input was not made
    so on a line of the form `name = expression`."""
    producers = evidence.input_producers
    producer = producers[argument] if argument < len(producers) else None
    if producer is None or producer.op not in LEARNED_OUTPUTS or producer.source_kind != "op":
        return None
    source = producer.source
    code = source.code.strip() if source.code else ""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    statement = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return None
    target = ast.get_source_segment(code, statement.targets[0])
    value = ast.get_source_segment(code, statement.value)
    softplus = "torch.nn.functional.softplus" if framework == "torch" else "tf.nn.softplus"
    comment = code[len(ast.get_source_segment(code, statement)) :].strip()
    new = f"{target} = {softplus}({value}) + {FLOOR}" + (f"  {comment}" if comment else "")
    edit = Edit(source.file, source.line, source.line, (new,), (code,))
    return Fix("activation_change", POSITIVE_TITLE, new, edits=(edit,))
