"""The tf.where trap: a non-finite value in the branch not taken still poisons the gradient."""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, Origin
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import source_code, source_focus
from gradient_doctor.core.knowledge.remedies.not_fixes import nan_gradient_not_fixes
from gradient_doctor.core.knowledge.rules.backward_singularity import SINGULARITIES, guard_fixes
from gradient_doctor.core.knowledge.source.calls import Call, find_call, replace_span
from gradient_doctor.core.knowledge.source.operands import risky_operand
from gradient_doctor.core.knowledge.source.spelling import spell
from gradient_doctor.core.knowledge.wording import at_step, nonfinite_kind, op_place

_TITLE = "Use the double-where: make the branch not taken harmless before computing it"
_GENERIC = "safe_x = tf.where(cond, x, tf.ones_like(x))\ny = tf.where(cond, f(safe_x), fallback)"
# A harmless stand-in for the masked values: one for log, sqrt, pow and division; zero
# for the inverse trigonometric functions, whose derivative is infinite at one.
_ZERO_SAFE = frozenset({"Acos", "Asin", "Atanh"})


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a NaN gradient caused by a non-finite value that a select (`tf.where`,
    `torch.where`) masked."""
    origin = evidence.origin
    if origin is None or evidence.phase != "backward" or not evidence.masked_by_select:
        return None
    forward = origin.gradient_of or origin.op
    code, focus = source_code(evidence), source_focus(evidence)
    fixes = (safe_where(code, forward, focus),)
    if forward in SINGULARITIES:
        fixes += guard_fixes(forward, code, focus, evidence.setup.framework)
    return Diagnosis(
        category="backward_singularity",
        explanation=explain(origin, forward, evidence.step, evidence.setup.framework),
        not_fixes=nan_gradient_not_fixes(
            f"{forward}'s derivative in the branch not taken",
            evidence.setup.framework,
            nonfinite_kind(origin),
        ),
        fixes=fixes,
    )


def explain(origin: Origin, forward: str, step: int | None, framework: str = "tf") -> str:
    """Say why a value the forward pass discarded still reaches the gradient (the
    select named as the user's framework spells it)."""
    where = "torch.where" if framework == "torch" else "tf.where"
    return (
        f"{op_place(origin, forward)}{at_step(step)} produced non-finite values in the "
        f"branch that {where} did not select, so the forward result was finite. In the "
        f"backward pass {where} sends that branch a zero gradient, which {forward}'s "
        "infinite derivative turns into 0 * inf = NaN."
    )


def safe_where(code: str, forward: str, focus: tuple[int, int] | None = None) -> Fix:
    """Build the double-where for the user's line.

    Args:
        code: str, the user's line (the one that created the forward op).
        forward: str, the forward op type, e.g. "Log".
        focus: where on the line the forward op was made (`SourceLine.span`).

    Returns:
        A `safe_where` fix; a generic one when the line does not parse.
    """
    where = find_call(code, ("where",), focus)
    branches = where.args[1:3] if where is not None and len(where.args) == 3 else ()
    for index, branch in enumerate(branches, start=1):
        operand = risky_operand(branch, forward)
        if operand is None:
            continue
        x, cond = operand.text, where.args[0]
        stand_in = _stand_in(where, forward, x)
        picked = (x, stand_in) if index == 1 else (stand_in, x)
        safe = f"safe_x = {where.render((cond, *picked))}"
        new_where = where.with_argument(index, operand.replaced(branch, "safe_x"))
        lines = (safe, replace_span(code, where.start, where.end, new_where))
        return Fix("safe_where", _TITLE, "\n".join(lines), rewrite=lines)
    operand = risky_operand(code, forward, focus)
    if operand is None:
        return Fix("safe_where", _TITLE, _GENERIC)
    stand_in = _stand_in(operand.call, forward, operand.text)
    safe = f"safe_x = {spell(operand.call, 'where')}(cond, {operand.text}, {stand_in})"
    lines = [
        f"{safe}  # cond: where the result is used",
        operand.replaced(code, "safe_x"),
        f"# then keep your {spell(operand.call, 'where')}(cond, ..., fallback) as it is",
    ]
    return Fix("safe_where", _TITLE, "\n".join(lines))


def _stand_in(call: Call | None, forward: str, x: str) -> str:
    """A harmless value to compute the forward op on where its result is not used."""
    return f"{spell(call, 'zeros_like' if forward in _ZERO_SAFE else 'ones_like')}({x})"
