"""A step that went non-finite as XLA compiled it, but stayed finite when replayed without XLA."""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.remedies import fixes as remedies

DISABLE_XLA = Fix(
    "disable_xla",
    "Compile the step without XLA: the same step stayed finite without it",
    "model.compile(optimizer, loss, jit_compile=False)\n"
    "# in a custom loop: @tf.function(jit_compile=False)",
)


def applies(evidence: Evidence) -> bool:
    """True when the step was compiled with XLA and its replay without XLA stayed finite."""
    return (
        evidence.setup.xla
        and evidence.replayed
        and not evidence.reproduced
        and evidence.origin is None
        and evidence.path_break is None
    )


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Say plainly that the value did not reproduce without XLA; decline otherwise.

    The replay runs the step eagerly, op by op, without XLA; pointing at any of its
    ops would name an op that did not go wrong there.
    """
    if not applies(evidence):
        return None
    step = "The step" if evidence.step is None else f"Step {evidence.step}"
    return Diagnosis(
        category="xla_only",
        explanation=(
            f"{step} went non-finite in the step compiled with XLA (jit_compile=True), but "
            "the non-finite value did not reproduce without XLA: replaying the same step "
            "eagerly, op by op, on the same batch and weights stayed finite. XLA's fused "
            "kernels may compute this differently (the order of a sum, rewritten or fused "
            "arithmetic, subnormals flushed to zero), so no op of yours can be named. Some "
            "value of the step is near the edge of float range: compile without XLA to "
            "confirm, and if the step then fails too, the doctor names the op."
        ),
        not_fixes=(),
        fixes=(
            DISABLE_XLA,
            remedies.normalize_input(evidence.setup.framework),
            remedies.lower_learning_rate(evidence.setup),
        ),
    )
