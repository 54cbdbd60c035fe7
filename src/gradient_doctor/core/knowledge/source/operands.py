"""Locate, on the user's line, the operand an op misbehaves at (log's x, a divisor, a base)."""

from __future__ import annotations

from dataclasses import dataclass

from gradient_doctor.core.knowledge.source.call_names import call_names
from gradient_doctor.core.knowledge.source.calls import (
    Call,
    MethodCall,
    find_call,
    find_method_call,
    grouped,
    is_namespace,
    replace_span,
)
from gradient_doctor.core.knowledge.source.operators import Binary, find_binary

# Ops whose risky operand is the second argument of their call (the divisor, log's y).
_SECOND_ARGUMENT = frozenset({"RealDiv", "Div", "FloorDiv", "Xlogy", "Xlog1py", "Xdivy"})
# Ops also written as an operator; the risky side is the base of ** and the divisor of /.
_OPERATORS = {"Pow": ("**", "left"), "RealDiv": ("/", "right"), "Div": ("/", "right")}
_OPERATORS["FloorDiv"] = ("//", "right")
_OPERATORS["Reciprocal"] = ("/", "right")


@dataclass(frozen=True)
class Operand:
    """The risky operand of an op, as written, and how to put something in its place.

    Attributes:
        text: the operand as written, e.g. "scores" or "x - 1".
        call: the call it is an argument of; None when it is an operator's operand.
        position: its argument position in `call`.
        binary: the operator expression it belongs to, when not a call.
        operator: that expression's operator.
        method: the tensor's method call it belongs to (`p.log()`); `position` 0 is
            the tensor the method is called on, 1 its first argument, and so on.
    """

    text: str
    call: Call | None = None
    position: int = 0
    binary: Binary | None = None
    operator: str = ""
    method: MethodCall | None = None

    def replaced(self, code: str, new_text: str) -> str:
        """Return `code` with this operand replaced by `new_text`."""
        if self.call is not None:
            new_call = self.call.with_argument(self.position, new_text)
            return replace_span(code, self.call.start, self.call.end, new_call)
        if self.method is not None:
            method, args = self.method, list(self.method.args)
            receiver = new_text if self.position == 0 else method.receiver
            if self.position > 0:
                args[self.position - 1] = new_text
            return replace_span(
                code, method.start, method.end, method.render(receiver, tuple(args))
            )
        assert self.binary is not None
        new_text = grouped(new_text)
        left, right = self.binary.left, self.binary.right
        if self.text == left and self.operator == "**":
            left = new_text
        else:
            right = new_text
        return replace_span(
            code, self.binary.start, self.binary.end, f"{left} {self.operator} {right}"
        )


def risky_operand(code: str, op: str, focus: tuple[int, int] | None = None) -> Operand | None:
    """Find the operand of `op` on the line, or None when the line has no such call.

    Args:
        code: str, the user's line, e.g. "gp = tf.sqrt(tf.reduce_sum(g ** 2))".
        op: str, the op type, e.g. "Sqrt", "Pow", "RealDiv".
        focus: where on the line the op was made (`SourceLine.span`), to pick the
            right one of several calls; None takes the first.

    Returns:
        An `Operand`, or None.
    """
    position = 1 if op in _SECOND_ARGUMENT else 0
    call = find_call(code, call_names(op), focus)
    if call is not None and is_namespace(call.prefix) and position < len(call.args):
        return Operand(call.args[position], call=call, position=position)
    method = find_method_call(code, call_names(op), focus)
    if method is not None and position <= len(method.args):
        text = method.args[position - 1] if position else method.receiver
        return Operand(text, position=position, method=method)
    if op in _OPERATORS:
        operator, side = _OPERATORS[op]
        binary = find_binary(code, operator, focus)
        if binary is not None:
            text = binary.left if side == "left" else binary.right
            return Operand(text, binary=binary, operator=operator)
    return None
