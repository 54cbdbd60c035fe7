"""Guards that keep an op's argument inside its domain, shared by forward and backward rules."""

from __future__ import annotations

from dataclasses import dataclass

from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.source.operands import risky_operand
from gradient_doctor.core.knowledge.source.spelling import fill


@dataclass(frozen=True)
class Guard:
    """How to keep one op's risky argument where the op and its gradient are finite.

    Attributes:
        template: a `spelling.fill` template for the guarded argument.
        fallback: a generic line with the op's call, for user lines that do not parse.
    """

    template: str
    fallback: str


_UNIT_INTERVAL = "{clip}({arg}, -1.0 + 1e-7, 1.0 - 1e-7)"
GUARDS = {
    "Log": Guard("{maximum}({arg}, 1e-7)", "y = tf.math.log(x)"),
    "Log1p": Guard("{maximum}({arg}, -1.0 + 1e-7)", "y = tf.math.log1p(x)"),
    "Xlogy": Guard("{maximum}({arg}, 1e-7)", "z = tf.math.xlogy(x, y)"),
    "Xlog1py": Guard("{maximum}({arg}, -1.0 + 1e-7)", "z = tf.math.xlog1py(x, y)"),
    "Sqrt": Guard("{maximum}({arg}, 1e-12)", "y = tf.sqrt(x)"),
    "Rsqrt": Guard("{maximum}({arg}, 1e-12)", "y = tf.math.rsqrt(x)"),
    "Pow": Guard("{maximum}({arg}, 1e-12)", "y = x ** p"),
    "Acos": Guard(_UNIT_INTERVAL, "angle = tf.acos(x)"),
    "Asin": Guard(_UNIT_INTERVAL, "angle = tf.asin(x)"),
    "Atanh": Guard(_UNIT_INTERVAL, "y = tf.atanh(x)"),
    "Acosh": Guard("{maximum}({arg}, 1.0 + 1e-7)", "y = tf.acosh(x)"),
}


def guard_fix(
    family: str,
    title: str,
    code: str,
    op: str,
    template: str | None = None,
    focus: tuple[int, int] | None = None,
) -> Fix:
    """A fix that wraps the op's risky operand on the user's line in its guard.

    Args:
        family: str, the fix family id.
        title: str, the fix's one-line title.
        code: str, the user's line ("" when unknown).
        op: str, the op type whose operand is guarded; a key of `GUARDS`.
        template: str, a template to use instead of the op's own guard.
        focus: where on the user's line the op was made (`SourceLine.span`).

    Returns:
        The fix, rewriting the user's line, or the op's generic line when the user's
        line has no call to the op.
    """
    guard = GUARDS[op]
    for users, line, at in ((True, code, focus), (False, guard.fallback, None)):
        operand = risky_operand(line, op, at)
        if operand is not None:
            guarded = operand.replaced(
                line, fill(template or guard.template, operand.call, operand.text)
            )
            return Fix(family, title, guarded, rewrite=(guarded,) if users else ())
    return Fix(family, title, guard.fallback)
