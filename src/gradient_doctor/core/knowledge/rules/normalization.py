"""A normalization layer that wrote NaN or inf from finite inputs: a slice of constant values
normalised with no epsilon.

Layer, batch, group and instance normalization divide each slice of their input (a row,
a channel, a group) by the root of its variance plus `eps`: `(x - mean) / sqrt(var + eps)`.
A slice whose values are all the same (a row of missing features filled with 0, a
channel of padding) has variance 0, and with `eps` set to 0 that is 0 / 0, NaN, in the
forward pass and in the gradient (whose `1 / sqrt(var + eps)` is inf). No weight decides
which slices of the batch are constant: the learning rate and clipping are not expected
to help. An
`eps` above 0 (the libraries' defaults: 1e-5 in PyTorch, 1e-3 in Keras) keeps the
division finite and changes a slice with any spread by a negligible amount.
"""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import framework_of
from gradient_doctor.core.knowledge.remedies.not_fixes import forward_not_fixes
from gradient_doctor.core.knowledge.wording import at_step, nonfinite_counts, op_place

# The fused normalization ops (PyTorch's aten ops in CamelCase, TensorFlow's fused batch
# norm): each divides by the root of its slices' variance plus an epsilon.
OPS = frozenset(
    {
        "NativeLayerNorm",
        "NativeBatchNorm",
        "NativeGroupNorm",
        "NativeBatchNormLegit",
        "NativeBatchNormLegitFunctional",
        "NativeBatchNormLegitNoTraining",
        "FusedBatchNorm",
        "FusedBatchNormV2",
        "FusedBatchNormV3",
    }
)
_EPSILON = {
    "torch": (
        "self.norm = nn.LayerNorm(normalized_shape, eps=1e-5)  # eps > 0: PyTorch's default\n"
        "# likewise nn.BatchNorm1d/2d(num_features, eps=1e-5), nn.GroupNorm(..., eps=1e-5)"
    ),
    "tf": (
        "layers.LayerNormalization(epsilon=1e-3)  # epsilon > 0: Keras's default\n"
        "# likewise layers.BatchNormalization(epsilon=1e-3)"
    ),
}


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a normalization's NaN or inf from finite inputs; decline one handed them."""
    origin = evidence.origin
    if origin is None or evidence.phase != "forward" or not origin.inputs:
        return None
    if not all(stats.finite for stats in origin.inputs) or origin.outputs[0].finite:
        return None
    framework = framework_of(evidence)
    keyword = "eps" if framework == "torch" else "epsilon"
    explanation = (
        f"{op_place(origin)}{at_step(evidence.step)} wrote {nonfinite_counts(origin)} from "
        "finite inputs. A normalization divides each slice of its input (a row, a "
        f"channel, a group) by sqrt(var + {keyword}): a slice whose values are all the "
        "same (a row of missing features filled with one value, a channel of padding) "
        f"has variance 0, and with {keyword} 0 (or below the dtype's resolution) that is "
        "0 / 0, NaN in the forward pass and in the gradient. Set the layer's "
        f"{keyword} above 0."
    )
    fix = Fix(
        "layer_epsilon",
        f"Give the normalization layer an {keyword} above 0, so a constant slice divides "
        "by a positive number",
        _EPSILON.get(framework, _EPSILON["tf"]),
    )
    return Diagnosis(
        category="forward_domain",
        explanation=explanation,
        not_fixes=forward_not_fixes(
            f"the 0 / 0 of a constant slice in {origin.reported_op}", evidence.weights_upstream
        ),
        fixes=(fix,),
    )
