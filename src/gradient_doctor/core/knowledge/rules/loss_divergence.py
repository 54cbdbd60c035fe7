"""A loss that climbed and stayed up with every value finite: updates too large (see
`core/divergence.py` for when a run counts as diverged)."""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import NotFix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.wording import approximately, format_number

# Optimizers that divide each gradient by a running measure of its own size: an
# update moves each weight by about the learning rate, whatever the gradient's norm.
_SIZE_NORMALISING = frozenset(
    {"Adam", "AdamW", "Adamax", "Nadam", "NAdam", "RAdam", "RMSprop", "Lion", "Adafactor"}
)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a diverged run by its largest updates; decline without a divergence."""
    divergence = evidence.divergence
    if divergence is None:
        return None
    layer = divergence.layer
    first, last = divergence.last_steps
    story = (
        f"The loss rose from {approximately(divergence.first_loss)} over the run's first "
        f"steps to {approximately(divergence.last_loss)} over its last (steps {first}-{last}), "
        f"above {approximately(divergence.limit)} from step {divergence.rose_at} on, and "
        "never came back: training diverged with every value finite, so no step failed."
    )
    facts = []
    if layer.growth >= 2:
        facts.append(
            f"the weights of `{layer.layer}` grew from {format_number(layer.first_norm)} to "
            f"{format_number(layer.last_norm)} in norm ({approximately(layer.growth)} times)"
        )
    if layer.median_update is not None:
        facts.append(
            f"each sampled update moved them by a median {_percent(layer.median_update)} of "
            "their norm (healthy training moves weights by about 0.1% a step)"
        )
    setup = evidence.setup
    rate = ""
    if setup.learning_rate is not None:
        named = f"{setup.optimizer} " if setup.optimizer else ""
        rate = f" ({named}at {format_number(setup.learning_rate)})"
    cause = (
        f"The updates were far too large for these weights: {' and '.join(facts)}. The "
        f"learning rate{rate} is too high for this model; bounded activations (tanh, "
        "sigmoid, softmax) kept the values finite while the weights ran away."
    )
    return Diagnosis(
        category="loss_diverged",
        explanation=f"{story} {cause}",
        not_fixes=_not_fixes(setup.optimizer),
        fixes=(remedies.lower_learning_rate(setup),),
    )


def _not_fixes(optimizer: str | None) -> tuple[NotFix, ...]:
    """Clipping, for an optimizer whose update size does not follow the gradient's."""
    if optimizer not in _SIZE_NORMALISING:
        return ()
    return (
        NotFix(
            "gradient_clipping",
            f"{optimizer} divides each gradient by a running root of its own squares, so an "
            "update moves each weight by about the learning rate whatever the gradient's "
            "norm: clipping the gradients leaves the updates' size as it was.",
        ),
    )


def _percent(ratio: float) -> str:
    """A share in percent, to two significant digits ("12%", "0.31%")."""
    return f"{approximately(100 * ratio)}%"
