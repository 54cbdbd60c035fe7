"""Rewrite the log of a sigmoid (or of one minus it) on the user's lines into log_sigmoid.

`log(sigmoid(z))` is -inf once the sigmoid underflows to 0 (z below about -88 in
float32), and `log(1 - sigmoid(z))` as soon as the sigmoid rounds to 1 (z above about
17): a hand-written binary cross-entropy, a GAN's discriminator loss. `log_sigmoid(z)`
and `log_sigmoid(-z)` compute the same values from the logit, finite everywhere, with
no clamp that changes them (`tf.math.log_sigmoid`, `torch.nn.functional.logsigmoid`,
`keras.ops.log_sigmoid`). The sigmoid is either inside the log's call, or on the line
that assigned the name the log reads (`p = tf.sigmoid(d(x))`): that line then keeps its
name for the logit, so every other reader of `p` is unchanged.
"""

from __future__ import annotations

import ast

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Edit, Fix
from gradient_doctor.core.knowledge.facts import source_code, source_focus
from gradient_doctor.core.knowledge.source.calls import (
    Call,
    assigned_name,
    find_call,
    find_calls,
    is_identifier,
    parses,
    replace_span,
)
from gradient_doctor.core.knowledge.source.spelling import namespace

TITLE = (
    "Compute the log of the sigmoid from its logit with log_sigmoid, which is exact and never -inf"
)
# Expressions a unary minus binds to as a whole (`-d(x)`, `-logits[:, 0]`).
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


def log_sigmoid(evidence: Evidence) -> Fix | None:
    """A `from_logits` fix rewriting the origin's `log(sigmoid(z))` or `log(1 - sigmoid(z))`
    (the sigmoid inline or on the line assigning the name the log reads) into
    `log_sigmoid(z)` or `log_sigmoid(-z)`; None when the lines do not have that shape."""
    origin = evidence.origin
    code = source_code(evidence).strip()
    if origin is None or origin.op != "Log" or not code:
        return None
    log = find_call(code, ("log",), source_focus(evidence))
    if log is None or len(log.args) != 1 or log.kwargs:
        return None
    complement, inner = _complement(log.args[0].strip())
    if inner is None:
        return None
    spelled = _spelling(log, evidence.setup.framework)
    if spelled is None:
        return None
    sigmoid = _whole_sigmoid(inner)
    if sigmoid is not None:  # log(sigmoid(z)) on the line itself
        rewritten = replace_span(
            code, log.start, log.end, f"{spelled}({_signed(sigmoid.args[0], complement)})"
        )
        return _fix(code, rewritten, ())
    return _over_two_lines(evidence, code, inner, spelled)


def _over_two_lines(evidence: Evidence, code: str, name: str, spelled: str) -> Fix | None:
    """`p = sigmoid(z)` on the sigmoid's line and `log(p)` or `log(1 - p)` on the log's:
    the first becomes `p_logits = z` and `p = sigmoid(p_logits)`, the log `log_sigmoid`
    of `p_logits` (or of its negation); so do the other logs of `p` on the log's line,
    on the lines between and on the few lines after it (`_LINES_AFTER`: the step ran
    them on the same `p`: the bare `log(p)` of a hand-written cross-entropy reaches 0
    next, for the other class, and a focal loss's `log(1 - p)` on the next line, as a
    copy with only `log(p)` rewritten shows)."""
    made = evidence.sigmoid_input
    here = evidence.origin.source
    if not is_identifier(name) or made is None or made.source is None or here is None:
        return None
    there = made.source
    if there.file != here.file or not there.line < here.line or not there.code:
        return None
    line = there.code.strip()
    if assigned_name(line) != name:
        return None
    sigmoid = _whole_sigmoid(line.split("=", 1)[1].strip())
    if sigmoid is None:
        return None
    logits = f"{name}_logits"
    split = (f"{logits} = {sigmoid.args[0].strip()}", f"{name} = {sigmoid.render((logits,))}")
    rewritten = _logs_of(code, name, logits, spelled)  # the origin's log among them
    edits = [Edit(there.file, there.line, there.line, split, (line,))]
    for call in evidence.same_op_calls:
        source = call.source
        after = here.line < source.line <= here.line + _LINES_AFTER
        if source.file != here.file or not (there.line < source.line < here.line or after):
            continue
        other = (source.code or "").strip()
        if assigned_name(other) == name:  # `p` made anew: its logs are another's
            continue
        changed = _logs_of(other, name, logits, spelled)
        if changed != other and parses(changed):
            edits.append(Edit(source.file, source.line, source.line, (changed,), (other,)))
    edits = sorted({edit.line: edit for edit in edits}.values(), key=lambda edit: edit.line)
    shown = [
        *(text for edit in edits if edit.line < here.line for text in edit.new_lines),
        rewritten,
        *(text for edit in edits if edit.line > here.line for text in edit.new_lines),
    ]
    return _fix(code, rewritten, tuple(edits), shown=shown)


# Lines after the log's own whose logs of the same probability are rewritten with it.
_LINES_AFTER = 5


def _logs_of(code: str, name: str, logits: str, spelled: str) -> str:
    """`code` with each `log(name)` and `log(1 - name)` in it written as log_sigmoid of
    `logits` (or of its negation)."""
    for call in reversed(find_calls(code, ("log",))):
        if len(call.args) != 1 or call.kwargs:
            continue
        complement, inner = _complement(call.args[0].strip())
        if inner is not None and inner.strip() == name:
            code = replace_span(
                code, call.start, call.end, f"{spelled}({_signed(logits, complement)})"
            )
    return code


def _fix(code: str, rewritten: str, edits: tuple[Edit, ...], shown=None) -> Fix | None:
    if rewritten == code or (parses(code) and not parses(rewritten)):
        return None
    text = "\n".join(shown) if shown else rewritten
    return Fix("from_logits", TITLE, text, rewrite=(rewritten,), edits=edits)


def _complement(argument: str) -> tuple[bool, str | None]:
    """(True, "x") for `1 - x` (or `1.0 - x`, in brackets or not), else (False, argument);
    (False, None) when the argument does not parse as an expression."""
    try:
        tree = ast.parse(argument, mode="eval").body
    except SyntaxError:
        return False, None
    if (
        isinstance(tree, ast.BinOp)
        and isinstance(tree.op, ast.Sub)
        and isinstance(tree.left, ast.Constant)
        and tree.left.value == 1
    ):
        return True, ast.get_source_segment(argument, tree.right)
    return False, argument


def _whole_sigmoid(text: str) -> Call | None:
    """`text` as one call of a sigmoid function with one argument (not a method), or None."""
    call = find_call(text, ("sigmoid",))
    if call is None or call.start != 0 or call.end != len(text) or len(call.args) != 1:
        return None
    if call.kwargs or (call.prefix and not _is_namespace(call.prefix)):
        return None
    return call


def _is_namespace(prefix: str) -> bool:
    """A module path (`tf.math.`, `torch.`, `F.`, `keras.ops.`), not a tensor's method."""
    head = prefix.split(".", 1)[0]
    return head in {"tf", "torch", "F", "nn", "keras", "ops", "K", "functional", "activations"}


def _spelling(log: Call, framework: str) -> str | None:
    """The log_sigmoid of the namespace the user's log is written in."""
    kind = namespace(log, framework)
    if kind == "torch":
        return "F.logsigmoid" if log.prefix.startswith("F.") else "torch.nn.functional.logsigmoid"
    if kind == "keras":
        return f"{log.prefix}log_sigmoid"
    if kind == "tf":
        return "tf.math.log_sigmoid"
    return None


def _signed(logit: str, negated: bool) -> str:
    """`logit`, or its negation (bracketed unless it binds as a whole)."""
    logit = logit.strip()
    if not negated:
        return logit
    try:
        atom = isinstance(ast.parse(logit, mode="eval").body, _ATOMS)
    except SyntaxError:
        return f"-({logit})"
    return f"-{logit}" if atom else f"-({logit})"
