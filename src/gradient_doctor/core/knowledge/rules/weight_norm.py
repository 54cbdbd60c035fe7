"""Weight normalization of a direction that is all zeros: 0 / 0 at the layer's first call.

PyTorch's `weight_norm` (the parametrization, or the older hook) computes a layer's
weight as `g * v / ||v||`: a magnitude `g` times the unit direction of `v`. A weight
initialised to zero before it was normalised (`nn.init.zeros_(layer.weight)`, the usual
way to start a residual branch at the identity) leaves `v` all zeros, whose norm is 0:
the direction is 0 / 0, NaN, from the first forward pass, before any update. No
learning rate or clipping reaches it. The branch starts at zero as intended when `v`
keeps its random initialisation and the magnitude `g` is zeroed instead.
"""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, NotFix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.wording import at_step, nonfinite_counts, op_place

# aten's `_weight_norm_interface` (and the decomposed `_weight_norm`), as the core names it.
OPS = frozenset({"WeightNormInterface", "WeightNorm"})
_ZERO_G = (
    "# keep the weight's random initialisation before weight_norm (no nn.init.zeros_ on it);\n"
    "# to start the layer at zero, zero its magnitude g instead:\n"
    "layer = torch.nn.utils.parametrizations.weight_norm(layer)\n"
    "torch.nn.init.zeros_(layer.parametrizations.weight.original0)"
)
_BEFORE_ANY_UPDATE = (
    "The direction is all zeros from its initialisation, before any update: {what} "
    "cannot reach the first forward pass's 0 / 0."
)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a weight normalization's NaN from a direction `v` that is all zeros;
    decline any other."""
    origin = evidence.origin
    if origin is None or evidence.phase != "forward" or not origin.inputs:
        return None
    direction = origin.inputs[0]
    size = direction.size or 0
    if not direction.finite or size == 0 or direction.zeros != size or origin.outputs[0].finite:
        return None
    explanation = (
        f"{op_place(origin)}{at_step(evidence.step)} wrote {nonfinite_counts(origin)}: weight "
        "normalization computes the weight as g * v / ||v||, and its direction v is all "
        f"zeros ({size} of {size}), so ||v|| is 0 and v / ||v|| is 0 / 0. A weight "
        "initialised to zero before `weight_norm` (to start a residual branch at the "
        "identity, say) has no direction to normalise. Keep the weight's random "
        "initialisation and zero the magnitude g instead: the layer still starts at zero."
    )
    return Diagnosis(
        category="forward_domain",
        explanation=explanation,
        not_fixes=(
            NotFix("lower_learning_rate", _BEFORE_ANY_UPDATE.format(what="no learning rate")),
            NotFix("gradient_clipping", _BEFORE_ANY_UPDATE.format(what="clipping")),
        ),
        fixes=(
            Fix(
                "better_init",
                "Zero the magnitude g of the weight-normalised layer, not its weight: the "
                "layer starts at zero and its direction stays defined",
                _ZERO_G,
            ),
        ),
    )
