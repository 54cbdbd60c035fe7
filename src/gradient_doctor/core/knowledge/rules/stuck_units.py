"""Gradients exactly zero because a layer's units all died or saturated, and what did it."""

from __future__ import annotations

import math

from gradient_doctor.core.evidence import Evidence, StepHistory
from gradient_doctor.core.findings import NotFix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.layer_groups import describe_layers, group_by_layer
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.wording import approximately, count, format_number, listing
from gradient_doctor.core.stuck_units import DEAD

# A gradient norm this many times the run's first is a huge update (healthy steps stay
# within a few times of each other), and so is an update moving the weights by this
# share of their norm in one step (healthy training moves them by about 0.1%).
HUGE_GROWTH = 10.0
HUGE_UPDATE = 0.1

_STATES = {
    DEAD: ("ReLU unit", "outputs 0 for every example (dead)", "the units died"),
    "saturated": (
        "sigmoid/tanh unit",
        "sits in the flat end of its curve for every example, where float32 rounds the "
        "slope to 0 (saturated)",
        "the units saturated",
    ),
}
_NO_BROKEN_PATH = NotFix(
    "straight_through",
    "No op on the path to the loss is piecewise constant: the units' outputs are stuck for "
    "every example, so there is no gradient to route around anything.",
)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain zero gradients by the layers whose units are all stuck; decline without them."""
    stuck = evidence.stuck_units
    if stuck is None:
        return None
    unit, state, what = _STATES[stuck.kind]
    groups = group_by_layer(stuck.variables)
    layers = listing([f"`{layer}`" for layer in stuck.layers])
    where = f"layer {layers}" if len(stuck.layers) == 1 else f"layers {layers}"
    verb = "has" if len(stuck.variables) == 1 else "have"
    story = (
        f"Every {unit} of {where} {state} since step {stuck.since}, so no gradient passes "
        f"back through it: {count(len(stuck.variables), 'variable')} "
        f"({describe_layers(groups)}) {verb} had exactly zero gradient since then and will "
        f"not train again. Nothing on the path to the loss is broken; {what}."
    )
    cause, huge = _cause(evidence)
    fixes = (remedies.lower_learning_rate(evidence.setup),) if huge else ()
    if stuck.kind == DEAD:
        fixes += (
            remedies.activation_change(
                "leaky_relu",
                "its units keep a small gradient when inactive and can recover",
                evidence.setup.framework,
            ),
            remedies.normalize_input(evidence.setup.framework),
            remedies.better_init(evidence.setup.framework),
        )
    else:
        fixes += (
            remedies.normalize_input(evidence.setup.framework),
            remedies.batch_normalization(f"the {unit} layers", evidence.setup.framework),
            remedies.activation_change(
                "relu", "it does not saturate for positive inputs", evidence.setup.framework
            ),
        )
    return Diagnosis(
        category="dead_units" if stuck.kind == DEAD else "saturation",
        explanation=f"{story} {cause}".strip(),
        not_fixes=(_NO_BROKEN_PATH,),
        fixes=fixes,
    )


def _cause(evidence: Evidence) -> tuple[str, bool]:
    """What came before the units stuck, and whether it was a huge update."""
    stuck = evidence.stuck_units
    rate = evidence.setup.learning_rate
    with_rate = f" with a learning rate of {format_number(rate)}" if rate is not None else ""
    if stuck.since == 0:
        return (
            "They were stuck from the first step: the initial weights and biases put every "
            "pre-activation there for the whole batch (inputs far from 0, or an "
            "initialisation far too large or offset).",
            False,
        )
    facts = []
    growth = _growth(evidence.history, stuck.since)
    if growth is not None:
        step, norm, first_step, first = growth
        facts.append(
            f"the gradient norm reached {approximately(norm)} at step {step}, "
            f"{approximately(norm / first)} times its {approximately(first)} at step {first_step}"
        )
    update = stuck.largest_update
    if update is not None and update[2] >= HUGE_UPDATE:
        layer, step, ratio = update
        facts.append(
            f"the update of step {step} changed the weights of `{layer}` by "
            f"{approximately(100 * ratio)}% of their norm at once (healthy training moves "
            "them by about 0.1% a step)"
        )
    if not facts:
        return "", False
    return (
        f"It followed a huge update{with_rate}: {' and '.join(facts)}. One step that large "
        "(a learning rate too high for these weights, or inputs on a large scale, not "
        "standardised) pushes every unit's pre-activation out of its working range at once.",
        True,
    )


def _growth(history: StepHistory, since: int) -> tuple[int, float, int, float] | None:
    """(step, norm, first step, first norm) of the largest gradient norm before `since`,
    when it is `HUGE_GROWTH` times the first one recorded."""
    points = [
        (step, norm)
        for step, norm in zip(history.steps, history.grad_norms, strict=True)
        if step < since and norm is not None and math.isfinite(norm) and norm > 0
    ]
    if len(points) < 2:
        return None
    first_step, first = points[0]
    step, norm = max(points[1:], key=lambda point: point[1])
    return (step, norm, first_step, first) if norm >= HUGE_GROWTH * first else None
