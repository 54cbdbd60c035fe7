"""What a framework adapter records per watched step: the records the detectors read.

Adapters turn framework events into these frozen dataclasses; detectors read nothing
else. Every measured field is optional (None when the adapter did not measure it, e.g.
in the cheap mode or between the every-k-steps samples).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType

from gradient_doctor.core.quick_init import quick_init

# Per-layer statistics (weight norms, update ratios, activations, stuck units) and
# risky ops' headroom are measured one step in this many by every adapter (a trend
# needs no more); per-layer gradient norms are kept every step and read on those steps.
LAYER_STATS_EVERY = 10
# A sigmoid output outside [SIGMOID_FLAT, 1 - SIGMOID_FLAT], or |tanh| above TANH_FLAT, sits
# where the curve's slope is below ~1% of its peak (`LayerRecord.saturated_fraction`).
SIGMOID_FLAT = 0.01
TANH_FLAT = 0.99

# How a risky op's input approaches the value where the op leaves the finite range.
# "max_input": exp-like ops; value = the largest input, limit = the overflow threshold
#     (88.72 for float32 exp). The limit is reached from below.
# "min_input": log/sqrt; value = the smallest input, limit = the domain's edge (0).
#     The limit is reached from above.
# "min_abs_denominator": divisions; value = the smallest |denominator|, limit = 0.
#     The limit is reached from above.
# "abs_input": acos/asin/atanh; value = the largest |input|, limit = 1. Reached from below.
# "max_abs_value": casts to float16/bfloat16; value = the largest |value| cast,
#     limit = the target dtype's largest finite value (65504 for float16). Reached from below.
HEADROOM_KINDS = (
    "max_input",
    "min_input",
    "min_abs_denominator",
    "abs_input",
    "max_abs_value",
)
# The kinds whose limit is reached by a value falling to it (the others rise to theirs).
FALLING_KINDS = frozenset({"min_input", "min_abs_denominator"})


@dataclass(frozen=True)
class HeadroomSample:
    """How far one risky op's input was from its limit at one step.

    Attributes:
        key: str, a stable id of the op across steps, e.g. its graph name
            "message_passing/Exp"; detectors track one series per key.
        op: str, the op type, e.g. "Exp", "Log", "RealDiv", "Cast".
        layer: str or None, the Keras layer (or module) that ran the op.
        file: str or None, the user's file that created the op, as the user gave it.
        line: int or None, the line in `file`.
        code: str or None, the text of that line.
        dtype: str, the dtype whose limit applies: the op's compute dtype, or for a
            cast the target dtype (e.g. "float16").
        kind: str, how the limit is approached; one of `HEADROOM_KINDS`.
        value: float, the extreme input of this step, in the units of the op's input
            (for the abs and denominator kinds, an absolute value).
        limit: float, where the op leaves the finite range, in the same units.
        reduction_axis: int or None, the axis along which the op's output is summed
            next (the normalisation of a hand-written softmax), when the adapter saw it;
            a fix that shifts the input by its maximum must use this axis.
        framework_op: str or None, the framework's own name for the op where it is not
            `op` (PyTorch's `exp` for "Exp"), which the report gives.

    Raises:
        ValueError: when `kind` is not one of `HEADROOM_KINDS`.
    """

    key: str
    op: str
    layer: str | None
    file: str | None
    line: int | None
    code: str | None
    dtype: str
    kind: str
    value: float
    limit: float
    reduction_axis: int | None = None
    framework_op: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in HEADROOM_KINDS:
            raise ValueError(
                f"`kind` must be one of {HEADROOM_KINDS}. Received: kind={self.kind!r}"
            )

    @property
    def gap(self) -> float:
        """How far the value is from the limit, positive while on the safe side."""
        if self.kind in FALLING_KINDS:
            return self.value - self.limit
        return self.limit - self.value


@quick_init
@dataclass(frozen=True)
class LayerRecord:
    """Gradient-flow statistics of one layer at one step; None where not measured.

    Attributes:
        layer: str, the layer's name.
        grad_norm: float or None, the L2 norm of the gradients of all the layer's
            trainable variables together (as `tf.linalg.global_norm` computes it).
        weight_norm: float or None, the L2 norm of those variables.
        update_ratio: float or None, the L2 norm of this step's update divided by
            `weight_norm` (dimensionless; ~1e-3 is typical of healthy training).
        activation_max_abs: float or None, the largest |activation| of the layer's
            output in this batch.
        dead_fraction: float or None, the fraction (0 to 1) of the layer's ReLU-like
            units whose output was 0 for every example of the batch.
        saturated_fraction: float or None, the fraction (0 to 1) of the layer's
            sigmoid/tanh units in the flat part of the curve (e.g. |tanh| > 0.99 or a
            sigmoid output outside [0.01, 0.99]) for every example of the batch.
    """

    layer: str
    grad_norm: float | None = None
    weight_norm: float | None = None
    update_ratio: float | None = None
    activation_max_abs: float | None = None
    dead_fraction: float | None = None
    saturated_fraction: float | None = None


@quick_init
@dataclass(frozen=True)
class StepRecord:
    """Everything an adapter measured at one optimizer step.

    Attributes:
        step: int, the 0-based count of optimizer steps (batches) across epochs.
        loss: float or None, the step's loss (the value the optimizer minimised).
        grad_norm: float or None, the global L2 norm of all gradients.
        layers: per-layer statistics, in the model's layer order.
        headroom: one sample per risky op the adapter watches.
        objective_losses: with several optimizers, each update's loss in the step, in
            the order of its updates (`loss` is the last); empty with one.
    """

    step: int
    loss: float | None = None
    grad_norm: float | None = None
    layers: tuple[LayerRecord, ...] = ()
    headroom: tuple[HeadroomSample, ...] = ()
    objective_losses: tuple[float | None, ...] = ()

    def layer_values(self, field: str) -> dict[str, float]:
        """The finite values of one `LayerRecord` field, by layer name.

        Args:
            field: str, a `LayerRecord` field, e.g. "grad_norm".

        Returns:
            {layer: value} for the layers where the field was measured and finite (a
            new dict the caller may change).

        Raises:
            AttributeError: for a name that is not a `LayerRecord` field.
        """
        return dict(self.measured(field))

    def measured(self, field: str) -> Mapping[str, float]:
        """`layer_values(field)` without the copy, for readers that only read it (the
        detectors and the run's series read each record's values several times).

        Raises:
            AttributeError: for a name that is not a `LayerRecord` field.
        """
        values = self.measured_fields().get(field)
        if values is not None:
            return values
        if field not in _MEASURED:
            raise AttributeError(f"`LayerRecord` has no field {field!r}.")
        return _NONE

    def measured_fields(self) -> Mapping[str, Mapping[str, float]]:
        """Each `LayerRecord` field measured and finite in some layer, in the fields'
        order, with its values by layer (`measured`); fields measured nowhere are left
        out, so a reader of every field skips those the adapter did not measure (most
        records carry the layers' gradient norms alone)."""
        by_field = self.__dict__.get("_measured_fields")
        if by_field is not None:
            return by_field
        if not self.layers:
            return _NONE
        gathered: dict[str, dict[str, float]] = {field: {} for field in _MEASURED}
        for layer in self.layers:
            for field in _MEASURED:
                value = getattr(layer, field)
                if value is not None and math.isfinite(value):
                    gathered[field][layer.layer] = float(value)
        by_field = {field: values for field, values in gathered.items() if values}
        # Kept on the record, beside its fields: gathered once for all its readers.
        object.__setattr__(self, "_measured_fields", by_field)
        return by_field


# The measured fields of a `LayerRecord` (all but its name).
_MEASURED = tuple(field.name for field in fields(LayerRecord) if field.name != "layer")
# What a record measured of a field measured nowhere (and of every field, without layers).
_NONE: Mapping = MappingProxyType({})
