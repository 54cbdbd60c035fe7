"""Write a score-function (REINFORCE) surrogate into the user's tape, after the loss is made.

When a discrete choice (`tf.argmax`, `tf.argmin`, `tf.math.top_k(...).indices`) cuts
the gradient path from the loss to the layers that made its logits, the remedy that
needs no redesign of the model downstream is the score-function estimator: add to
the loss a term whose value is zero and whose gradient is the loss times the
gradient of the choice's log-probability. Placed on the line after the tape's target
loss is last assigned, inside the `with tf.GradientTape()` block, it reads:

    surrogate = tf.stop_gradient(loss) * tf.reduce_mean(
        -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tokens, logits=logits))
    loss += surrogate - tf.stop_gradient(surrogate)

The names come from the user's source: the choice's target and argument, the
`.gradient(...)` call's first argument and tape, the `with` block that opens the
tape. Where any of them cannot be found for certain, no edit is written.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from gradient_doctor.core.findings import Edit, Fix, SourceLine
from gradient_doctor.core.knowledge.source.calls import grouped
from gradient_doctor.core.knowledge.source.syntax_edit import (
    callee,
    module_alias,
    number,
    parse,
    segment,
)

# The op types of a choice, and the calls on the user's line that make each.
CHOICE_CALLS = {
    "ArgMax": ("argmax",),
    "ArgMin": ("argmin",),
    "TopKV2": ("top_k",),
}
# Integer dtypes a choice may be cast to and stay a valid label.
_INTEGER_DTYPES = frozenset({"int32", "int64", "int16", "int8", "uint8"})
# The name the surrogate term takes (a suffix is added when the file uses it already).
_SURROGATE = "surrogate"
# Why the pathwise remedies are not the patch: they change what the model downstream takes.
_ALTERNATIVES = (
    "# Pathwise alternatives (lower-variance gradients) change what the model after the",
    "# choice takes: the straight-through Gumbel-softmax or soft embeddings",
    "# (tf.nn.softmax(logits) @ the embedding matrix) feed it probabilities instead of",
    "# token ids, so its input layer must change too; that redesign is left to you.",
)


@dataclass(frozen=True)
class Surrogate:
    """A surrogate placed in the user's file.

    Attributes:
        edit: the edit adding it after the loss's last assignment.
        loss: the tape's target loss, as named in the user's code.
        choice: the name of the chosen indices.
        logits: the scores they were chosen from, as written.
        lines: the added lines, without indentation (the code to read).
    """

    edit: Edit
    loss: str
    choice: str
    logits: str
    lines: tuple[str, ...]


def score_function_surrogate(
    op: str,
    choice_line: SourceLine,
    gradient_call: SourceLine,
    lines: Sequence[str],
    choice_rank: int | None = None,
) -> Surrogate | None:
    """The surrogate for a choice made by `op` on `choice_line`, for the tape whose
    `.gradient(...)` call is on `gradient_call`; None when it cannot be written for certain.

    Args:
        op: the op type where the gradient path broke ("ArgMax", "ArgMin", "TopKV2").
        choice_line: the user's line that made the choice.
        gradient_call: the user's line of the `tape.gradient(...)` call that returned
            None for the variables (the same file as `choice_line`).
        lines: that file's lines.
        choice_rank: the rank of the choice's output when known (an argmax over a
            non-negative axis is the logits' last axis only when the axis equals it).

    Returns:
        The `Surrogate`, or None when the op is not a choice, the file changed, the
        names are not plain names in the tape's block, or the loss is assigned where
        the surrogate cannot follow it.
    """
    if op not in CHOICE_CALLS or choice_line.file != gradient_call.file:
        return None
    tree, text = parse(lines)
    if tree is None:
        return None
    tf = module_alias(tree, "tensorflow")
    gradient = _gradient_call(tree, gradient_call.line)
    if tf is None or gradient is None:
        return None
    tape, loss = gradient
    block = _tape_block(tree, gradient_call.line, tape)
    if block is None:
        return None
    choice = _choice(block.body, choice_line.line, CHOICE_CALLS[op], text, choice_rank)
    if choice is None:
        return None
    index, name, logits = choice
    last = _last_assignment(block.body, loss, after=index)
    if last is None or _rebinds(block.body[index + 1 : last + 1], {name, logits}):
        return None
    statement = block.body[last]
    if statement.end_lineno >= gradient_call.line:  # the gradient is taken before the loss
        return None
    scores = f"-{grouped(logits)}" if op == "ArgMin" else logits
    surrogate = _fresh(tree, _SURROGATE)
    added = _surrogate_lines(tf, op, loss, name, scores, surrogate)
    first, end = statement.lineno, statement.end_lineno
    old = tuple(text[first - 1 : end])
    indent = old[0][: len(old[0]) - len(old[0].lstrip())]
    edit = Edit(gradient_call.file, first, end, (*old, *(indent + line for line in added)), old)
    return Surrogate(edit, loss, name, logits, added)


def as_fix(fix: Fix, surrogate: Surrogate) -> Fix:
    """`fix` (the policy-gradient remedy) retitled and its code the surrogate's lines."""
    title = (
        f"Score-function (REINFORCE) surrogate: keep the discrete `{surrogate.choice}` and "
        f"add to `{surrogate.loss}` a zero-valued term whose gradient reaches the layers "
        f"that made `{surrogate.logits}`"
    )
    return dataclasses.replace(fix, title=title, code="\n".join((*surrogate.lines, *_ALTERNATIVES)))


def _surrogate_lines(
    tf: str, op: str, loss: str, choice: str, scores: str, surrogate: str
) -> tuple[str, ...]:
    """The surrogate's lines: a zero-valued term whose gradient reaches the logits."""
    if op == "TopKV2":  # k indices per row: the log-probability of each one picked
        log_prob = (f"    {tf}.gather({tf}.nn.log_softmax({scores}), {choice}, batch_dims=-1)",)
    else:
        log_prob = (
            f"    -{tf}.nn.sparse_softmax_cross_entropy_with_logits(",
            f"        labels={choice}, logits={scores}",
            "    )",
        )
    return (
        f"# Score-function (REINFORCE) surrogate, zero in value ({loss} is unchanged): its",
        f"# gradient makes the chosen {choice} less likely the higher the loss they led to.",
        f"{surrogate} = {tf}.stop_gradient({loss}) * {tf}.reduce_mean(",
        *log_prob,
        ")",
        f"{loss} += {surrogate} - {tf}.stop_gradient({surrogate})",
    )


def _gradient_call(tree: ast.Module, line: int) -> tuple[str, str] | None:
    """(tape, loss) of the one `tape.gradient(loss, ...)` call on `line`, both plain names."""
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and node.lineno <= line <= node.end_lineno
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "gradient"
        and isinstance(node.func.value, ast.Name)
    ]
    if len(found) != 1:
        return None
    call = found[0]
    target = (
        call.args[0]
        if call.args
        else next((k.value for k in call.keywords if k.arg == "target"), None)
    )
    if not isinstance(target, ast.Name):
        return None
    return call.func.value.id, target.id


def _tape_block(tree: ast.Module, line: int, tape: str) -> ast.With | None:
    """The `with ...GradientTape(...) as tape:` block of the function holding `line`; None
    unless the function opens that tape exactly once before it (else which one ran is
    unknown)."""
    function = _innermost_function(tree, line)
    blocks = [
        node
        for node in _walk_scope(function if function is not None else tree)
        if isinstance(node, ast.With)
        and node.lineno <= line
        and any(
            isinstance(item.context_expr, ast.Call)
            and callee(item.context_expr.func) == "GradientTape"
            and isinstance(item.optional_vars, ast.Name)
            and item.optional_vars.id == tape
            for item in node.items
        )
    ]
    return blocks[0] if len(blocks) == 1 else None


def _innermost_function(tree: ast.Module, line: int) -> ast.AST | None:
    functions = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.lineno <= line <= node.end_lineno
    ]
    return max(functions, key=lambda f: f.lineno, default=None)


def _walk_scope(scope: ast.AST):
    """The nodes of `scope`, not descending into nested functions or classes."""
    pending = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            pending.extend(ast.iter_child_nodes(node))


def _choice(
    body: list[ast.stmt],
    line: int,
    calls: tuple[str, ...],
    text: list[str],
    rank: int | None,
) -> tuple[int, str, str] | None:
    """(index in `body`, chosen name, logits) of the statement on `line` making the choice.

    The statement must be a direct child of the tape's block, assign the choice (or an
    integer cast of it, or top_k's indices) to one plain name, and choose over the last
    axis of logits that are a plain name.
    """
    for index, statement in enumerate(body):
        if statement.lineno <= line <= statement.end_lineno:
            if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
                return None
            found = _chosen(statement.targets[0], statement.value, calls, rank)
            if found is None:
                return None
            name, logits = found
            return index, name, segment(text, logits)
    return None


def _chosen(
    target: ast.expr, value: ast.expr, calls: tuple[str, ...], rank: int | None
) -> tuple[str, ast.Name] | None:
    """(name, logits) of `target = value` when it assigns a choice over the last axis."""
    if "top_k" in calls:
        if isinstance(value, ast.Attribute) and value.attr == "indices":
            call, name = value.value, target
        elif isinstance(target, ast.Tuple) and len(target.elts) == 2:
            call, name = value, target.elts[1]
        else:
            return None
        if not _is_call(call, calls) or not isinstance(name, ast.Name):
            return None
        logits = _argument(call, 0, "input")
        return (name.id, logits) if isinstance(logits, ast.Name) else None
    if not isinstance(target, ast.Name):
        return None
    call = _uncast(value)
    if not _is_call(call, calls):
        return None
    logits = _argument(call, 0, "input")
    if not isinstance(logits, ast.Name) or not _last_axis(_argument(call, 1, "axis"), rank):
        return None
    return target.id, logits


def _uncast(value: ast.expr) -> ast.expr:
    """The argument of `tf.cast(x, tf.int32)` (an integer cast keeps a valid label), else
    `value` itself."""
    if not (isinstance(value, ast.Call) and callee(value.func) == "cast"):
        return value
    dtype = _argument(value, 1, "dtype")
    spelled = callee(dtype) if isinstance(dtype, ast.Attribute | ast.Name) else None
    if isinstance(dtype, ast.Constant) and isinstance(dtype.value, str):
        spelled = dtype.value
    return _argument(value, 0, "x") if spelled in _INTEGER_DTYPES else value


def _last_axis(axis: ast.expr | None, rank: int | None) -> bool:
    """The argmax's axis is its input's last: -1, or the output's rank when that is known
    (no axis means axis 0)."""
    value = 0.0 if axis is None else number(axis)
    if value is None or value != int(value):
        return False
    return value == -1 or (rank is not None and value == rank)


def _is_call(node: ast.expr | None, names: tuple[str, ...]) -> bool:
    return isinstance(node, ast.Call) and callee(node.func) in names


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    return call.args[position] if position < len(call.args) else None


def _last_assignment(body: list[ast.stmt], name: str, after: int) -> int | None:
    """The index of the statement in `body` that assigns `name` last, after `after`; None
    when the last assignment lies nested inside another statement (an `if`, a loop)."""
    last = None
    for index, statement in enumerate(body):
        if index > after and _assigns(statement, name):
            last = index
        elif index > after and _rebinds([statement], {name}):
            return None
    if last is not None and _rebinds(body[last + 1 :], {name}):
        return None
    return last


def _assigns(statement: ast.stmt, name: str) -> bool:
    """`statement` is a plain assignment of `name` (`=`, `+=`, annotated)."""
    if isinstance(statement, ast.Assign):
        return any(name in _target_names(t) for t in statement.targets)
    if isinstance(statement, ast.AugAssign | ast.AnnAssign):
        return statement.value is not None and name in _target_names(statement.target)
    return False


def _target_names(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Tuple | ast.List):
        return {n for element in target.elts for n in _target_names(element)}
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return set()


def _rebinds(statements: list[ast.stmt], names: set[str]) -> bool:
    """Any of `names` is bound anywhere in `statements` (nested blocks included)."""
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
                if node.id in names:
                    return True
    return False


def _fresh(tree: ast.Module, base: str) -> str:
    """`base`, or `base_2`, ...: a name the file does not use anywhere."""
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    name, number_ = base, 1
    while name in used:
        number_ += 1
        name = f"{base}_{number_}"
    return name
