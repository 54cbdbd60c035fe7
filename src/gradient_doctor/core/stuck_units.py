"""Zero gradients explained by stuck units: a layer whose every unit is dead or saturated.

A variable whose gradient stays exactly zero usually means a broken path to the loss
(`tf.sign`, a rounding trick). But when every ReLU of a layer outputs 0 for every
example, or every sigmoid/tanh unit sits where float32 rounds its slope to 0, nothing
passes back through that layer: its own variables, the layers before it and the
kernel after it all get exactly zero, with nothing broken in the graph. This module
finds such layers among the per-layer statistics and the largest update sampled
before the gradients stopped (the one huge step that usually kills ReLUs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gradient_doctor.core.knowledge.layer_groups import layer_of_name
from gradient_doctor.core.records import LayerRecord

# A layer is stuck when at least this fraction of its units are (every unit, up to
# rounding of the fraction).
ALL_UNITS = 0.999
DEAD, SATURATED = "dead", "saturated"
_FIELDS = {DEAD: "dead_fraction", SATURATED: "saturated_fraction"}


@dataclass(frozen=True)
class StuckUnits:
    """Layers all of whose units stopped passing gradient, and what came before.

    Attributes:
        kind: `DEAD` (ReLU units that output 0 for every example) or `SATURATED`
            (sigmoid/tanh units in the flat ends of the curve for every example).
        layers: the layers all of whose units are stuck.
        variables: the variables whose gradient has been exactly zero since `since`.
        since: the first step of the zero gradients.
        largest_update: (layer, step, update norm / weight norm) of the largest update
            sampled up to `since`, or None when none was measured.
    """

    kind: str
    layers: tuple[str, ...]
    variables: tuple[str, ...]
    since: int
    largest_update: tuple[str, int, float] | None = None


def find_stuck_units(
    variables: Sequence[str],
    layers: Sequence[LayerRecord],
    since: int,
    update_ratios: Mapping[str, tuple[Sequence[int], Sequence[float]]] | None = None,
) -> StuckUnits | None:
    """The stuck layers behind `variables`' zero gradients, or None when there are none.

    A layer counts only when some of the zero-gradient variables are its own: a dead
    layer elsewhere does not explain them.

    Args:
        variables: names of the variables with exactly zero gradient ("model/dense/kernel").
        layers: the latest per-layer statistics (their dead and saturated fractions).
        since: the first step of the zero gradients.
        update_ratios: layer -> (steps, update / weight norm) sampled over the run.

    Returns:
        The stuck units, dead ones first when a layer is both.
    """
    owners = {layer_of_name(name) for name in variables}
    for kind, field in _FIELDS.items():
        stuck = tuple(
            record.layer
            for record in layers
            if record.layer in owners and (getattr(record, field) or 0.0) >= ALL_UNITS
        )
        if stuck:
            largest = _largest(update_ratios or {}, since)
            return StuckUnits(kind, stuck, tuple(variables), since, largest)
    return None


def _largest(
    update_ratios: Mapping[str, tuple[Sequence[int], Sequence[float]]], since: int
) -> tuple[str, int, float] | None:
    """The largest sampled update at or before `since`: (layer, step, ratio)."""
    best = None
    for layer, (steps, ratios) in update_ratios.items():
        for step, ratio in zip(steps, ratios, strict=True):
            if step <= since and (best is None or ratio > best[2]):
                best = (layer, step, ratio)
    return best
