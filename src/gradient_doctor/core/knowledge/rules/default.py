"""The rule for ops no other rule knows: an honest, generic diagnosis by phase and output."""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, Origin
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import outputs_inf
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.remedies.not_fixes import (
    forward_not_fixes,
    nan_gradient_not_fixes,
)
from gradient_doctor.core.knowledge.wording import (
    at_step,
    from_data_note,
    nonfinite_counts,
    nonfinite_kind,
    op_place,
    value_range,
)

_CLIP_DOMAIN = {
    "tf": Fix(
        "clip_input_domain",
        "Clip the op's input to the range where it is defined",
        "x = tf.clip_by_value(x, low, high)  # the range where the op is defined and smooth",
    ),
    "torch": Fix(
        "clip_input_domain",
        "Clip the op's input to the range where it is defined",
        "x = torch.clamp(x, low, high)  # the range where the op is defined and smooth",
    ),
}
_CUSTOM_GRADIENT = {
    "tf": Fix(
        "custom_gradient",
        "Give the op a gradient that stays finite at its singular points",
        "@tf.custom_gradient\n"
        "def safe_f(x):\n"
        "    def grad(upstream):\n"
        "        return tf.where(tf.math.is_finite(df(x)), upstream * df(x), tf.zeros_like(x))\n"
        "    return f(x), grad",
    ),
    "torch": Fix(
        "custom_gradient",
        "Give the op a gradient that stays finite at its singular points",
        "class SafeF(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return f(x)\n"
        "    @staticmethod\n"
        "    def backward(ctx, upstream):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        slope = df(x)\n"
        "        return torch.where(torch.isfinite(slope), upstream * slope, 0.0)",
    ),
}


def _spelled(fixes: dict[str, Fix], framework: str) -> Fix:
    """The generic fix written for the user's framework (TensorFlow's for any other)."""
    return fixes.get(framework, fixes["tf"])


def diagnose(evidence: Evidence) -> Diagnosis:
    """Diagnose any evidence; used when no specific rule applies."""
    origin = evidence.origin
    if origin is None:
        return _unlocated(evidence)
    if evidence.phase == "backward":
        forward = origin.gradient_of or origin.op
        return Diagnosis(
            category="backward_singularity",
            explanation=explain(origin, evidence.step, f"the gradient of {forward}"),
            not_fixes=nan_gradient_not_fixes(
                f"the derivative of {forward} at these inputs",
                evidence.setup.framework,
                nonfinite_kind(origin),
            ),
            fixes=(
                _spelled(_CLIP_DOMAIN, evidence.setup.framework),
                _spelled(_CUSTOM_GRADIENT, evidence.setup.framework),
            ),
        )
    overflow = outputs_inf(origin)
    upstream = evidence.weights_upstream
    return Diagnosis(
        category="forward_overflow" if overflow else "forward_domain",
        explanation=explain(origin, evidence.step, origin.op) + from_data_note(upstream),
        not_fixes=forward_not_fixes(f"the non-finite output of {origin.reported_op}", upstream),
        fixes=(
            remedies.upstream_remedies(evidence)
            if overflow
            else (
                _spelled(_CLIP_DOMAIN, evidence.setup.framework),
                remedies.normalize_input(evidence.setup.framework),
            )
        ),
    )


def explain(origin: Origin, step: int | None, subject: str) -> str:
    """Name the op, what it wrote and its input range; admit there is no specific rule."""
    return (
        f"{op_place(origin)}{at_step(step)} wrote {nonfinite_counts(origin)} from finite "
        f"inputs ranging {value_range(origin.inputs)}. The doctor has no specific rule for "
        f"{subject}; look for the inputs where it leaves its finite range."
    )


# A step that went non-finite where no op could be named.
UNLOCATED = "unlocated_nonfinite"


def _unlocated(evidence: Evidence) -> Diagnosis:
    """The step went non-finite but no op could be named (e.g. the replay stayed finite)."""
    if not evidence.replayed and evidence.unreplayable:
        replay = f" ({evidence.unreplayable})"
    elif not evidence.replayed:
        replay = " (the step could not be run again to look for it)"
    elif not evidence.reproduced:
        replay = ", and replaying the step stayed finite; the cause may be nondeterministic"
    else:
        replay = (
            ": its replay went non-finite again, but no op it recorded wrote the value from "
            "finite inputs"
        )
    step = "The step" if evidence.step is None else f"Step {evidence.step}"
    return Diagnosis(
        category=UNLOCATED,
        explanation=f"{step} went non-finite, but no single op could be named{replay}."
        + _skipped_note(evidence.skipped_updates),
        not_fixes=(),
        fixes=(
            remedies.lower_learning_rate(evidence.setup),
            remedies.gradient_clipping(evidence.setup),
        ),
    )


def _skipped_note(skipped: int) -> str:
    """Say that updates were skipped unseen, when the check was read only at the end."""
    if skipped <= 1:
        return ""
    return (
        " Nothing read the doctor's check of that step until the run ended, so its update "
        f"and the {skipped - 1} after it were skipped: the weights stayed those of the last "
        "good step."
    )
