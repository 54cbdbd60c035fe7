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

Keras 3's normalization layers compute in plain ops (`rsqrt(var + epsilon)`), so the op
that fails is an Rsqrt (or a root, a division) that the replay names on the line that
built the layer: that line's `epsilon=0` is the fix's place, a patch setting it to
Keras's default. A batch normalization's statistics come from the rows that share a
batch: a feature constant in one batch need not be in a larger one, so a larger batch
is not ruled out for it.
"""

from __future__ import annotations

from dataclasses import replace

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, KeywordEdit
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import framework_of
from gradient_doctor.core.knowledge.remedies.not_fixes import forward_not_fixes
from gradient_doctor.core.knowledge.source.calls import find_call
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
# The layers that normalise by the root of a variance plus an epsilon, as the user builds
# them (Keras's and PyTorch's), and the ops their plain-op forward divides with.
LAYER_CLASSES = (
    "LayerNormalization",
    "BatchNormalization",
    "GroupNormalization",
    "SyncBatchNormalization",
    "LayerNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "GroupNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
)
_ROOT_OPS = frozenset({"Rsqrt", "Sqrt", "RealDiv", "Div", "Reciprocal"})
# What the patch sets the layer's epsilon to: Keras's default (PyTorch's is 1e-5).
LAYER_EPSILON = 1e-3
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


def diagnose_layer(evidence: Evidence) -> Diagnosis | None:
    """Explain a root or division that a normalization layer built with an epsilon of 0
    wrote non-finite (Keras 3 computes its layers in plain ops), with a patch of the line
    that built it; decline any other op."""
    origin = evidence.origin
    if origin is None or origin.op not in _ROOT_OPS or origin.source_kind != "layer_creation":
        return None
    code = origin.source.code if origin.source is not None else ""
    layer = find_call(code or "", LAYER_CLASSES)
    if layer is None:
        return None
    keyword = next((k for k in ("epsilon", "eps") if k in dict(layer.kwargs)), None)
    value = _number(dict(layer.kwargs).get(keyword, "")) if keyword else None
    if value is None or value > 1e-12:
        return None
    diagnosis = diagnose(evidence, require_fused=False)
    if diagnosis is None:
        return None
    edit = KeywordEdit(
        origin.source, keyword, (value, int(value)) if value == int(value) else (value,),
        f"{LAYER_EPSILON:g}", callee=layer.name,
    )  # fmt: skip
    fix = replace(
        diagnosis.fixes[0],
        code=f"{layer.prefix}{layer.name}(..., {keyword}={LAYER_EPSILON:g})",
        keyword_edits=(edit,),
        trial_setting=("epsilon", LAYER_EPSILON),
    )
    not_fixes = diagnosis.not_fixes
    if "Batch" in layer.name:  # a larger batch changes which rows share the statistics
        not_fixes = tuple(item for item in not_fixes if item.remedy != "larger_batch")
    return replace(diagnosis, fixes=(fix,), not_fixes=not_fixes)


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def diagnose(evidence: Evidence, require_fused: bool = True) -> Diagnosis | None:
    """Explain a normalization's NaN or inf from finite inputs; decline one handed them.

    `require_fused` False: the origin is a plain op of a normalization layer
    (`diagnose_layer` checked it), not a fused normalization op."""
    origin = evidence.origin
    if origin is None or evidence.phase != "forward" or not origin.inputs:
        return None
    if require_fused and origin.op not in OPS:
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
