"""A run whose loss diverged with every value finite: the updates were too large.

A learning rate far too high does not always end in NaN. Where the activations are
bounded (tanh, sigmoid, a softmax's probabilities), the weights can grow a thousandfold
while every value stays finite: the loss climbs from where it started and stays there,
and a run that says "healthy" says the opposite of the truth. At the end of a run that
failed nowhere, it diverged when both hold:

- its loss rose: the median of its last tenth is more than `LOSS_RISE_ALLOWED` times
  its size above the median of its first steps (the test a patched copy's loss must
  pass, `core/fix_trials.diverged`, applied to the run itself); and
- some layer's updates were far too large for it: its weight norm grew `HUGE_GROWTH`
  times from its first sample to its last, or its sampled updates moved its weights by
  a median of `HUGE_UPDATE` of their norm or more (healthy training moves them by about
  0.1% a step).

The second condition tells a diverging run from a loss that rises by design (a DQN's
temporal-difference loss as its values grow, a VAE's KL term as its weight warms up),
whose weights neither explode nor move by a tenth at every step. Without per-layer
statistics (the cheap mode) nothing is judged. A run with several optimizers (a GAN's
two halves) is not judged either: its loss is one of several objectives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gradient_doctor.core.fix_trials import LOSS_RISE_ALLOWED
from gradient_doctor.core.forecast import median
from gradient_doctor.core.knowledge.rules.stuck_units import HUGE_GROWTH, HUGE_UPDATE

# The run's start and end: the median loss of the first and of the last this-share of
# its points (at least `_EDGE_POINTS` each).
_EDGE_SHARE = 0.1
_EDGE_POINTS = 3
# Fewer loss points than this say nothing of a trend.
MIN_POINTS = 20


@dataclass(frozen=True)
class LayerGrowth:
    """What one layer's weights did over the run.

    Attributes:
        layer: the layer's name.
        first_norm: its weight norm at its first sample.
        last_norm: its weight norm at its last sample.
        median_update: the median of its sampled update / weight norm ratios, or None
            when none was sampled.
    """

    layer: str
    first_norm: float
    last_norm: float
    median_update: float | None

    @property
    def growth(self) -> float:
        """How many times its weight norm grew."""
        return self.last_norm / self.first_norm if self.first_norm > 0 else math.inf

    @property
    def too_large(self) -> bool:
        """Its updates were far too large for it (`HUGE_GROWTH`, `HUGE_UPDATE`)."""
        huge = self.median_update is not None and self.median_update >= HUGE_UPDATE
        return self.growth >= HUGE_GROWTH or huge


@dataclass(frozen=True)
class Divergence:
    """A run whose loss rose and stayed up, with the layer that shows why.

    Attributes:
        first_loss: the median loss of the run's first steps.
        last_loss: the median loss of its last steps.
        limit: the loss past which it had risen too far (`LOSS_RISE_ALLOWED` times
            `first_loss` above it).
        rose_at: the first step whose loss was past the rise allowed, never below it
            again for long (the step the problem is dated to).
        last_steps: (first, last) step of the last stretch `last_loss` is taken over.
        layer: the layer whose updates were the largest for it.
    """

    first_loss: float
    last_loss: float
    limit: float
    rose_at: int
    last_steps: tuple[int, int]
    layer: LayerGrowth


def find_divergence(
    steps: Sequence[int],
    losses: Sequence[float],
    weight_norms: Mapping[str, tuple[Sequence[int], Sequence[float]]],
    update_ratios: Mapping[str, tuple[Sequence[int], Sequence[float]]],
    several_objectives: bool = False,
) -> Divergence | None:
    """The run's divergence, or None when it did not diverge (see the module's doc).

    Args:
        steps: the steps of the loss points, increasing (from where training began).
        losses: the loss at each of `steps` (non-finite ones are skipped).
        weight_norms: layer -> (steps, weight norm) sampled over the run.
        update_ratios: layer -> (steps, update norm / weight norm) sampled over it.
        several_objectives: more than one optimizer trained (a GAN).
    """
    if several_objectives:
        return None
    points = [(s, v) for s, v in zip(steps, losses, strict=True) if math.isfinite(v)]
    if len(points) < MIN_POINTS or min(v for _, v in points) < 0:
        return None  # too short to show a trend; a signed loss has no size to rise by
    edge = max(_EDGE_POINTS, int(_EDGE_SHARE * len(points)))
    first = median([v for _, v in points[:edge]])
    tail = points[-edge:]
    last = median([v for _, v in tail])
    limit = first + LOSS_RISE_ALLOWED * max(first, 1e-12)
    if last <= limit:
        return None
    layers = [_growth(name, weight_norms[name], update_ratios.get(name)) for name in weight_norms]
    too_large = [layer for layer in layers if layer is not None and layer.too_large]
    if not too_large:
        return None
    worst = max(too_large, key=lambda layer: (layer.growth, layer.median_update or 0.0))
    return Divergence(first, last, limit, _rose_at(points, limit), (tail[0][0], tail[-1][0]), worst)


def _growth(
    layer: str,
    norms: tuple[Sequence[int], Sequence[float]],
    ratios: tuple[Sequence[int], Sequence[float]] | None,
) -> LayerGrowth | None:
    """The layer's growth over its finite samples; None with fewer than two."""
    values = [v for v in norms[1] if math.isfinite(v)]
    if len(values) < 2:
        return None
    updates = [v for v in (ratios[1] if ratios else ()) if math.isfinite(v)]
    return LayerGrowth(layer, values[0], values[-1], median(updates) if updates else None)


def _rose_at(points: Sequence[tuple[int, float]], limit: float) -> int:
    """The first step past `limit` after which at least half the losses stayed past it."""
    above = [v > limit for _, v in points]
    for index, (step, _) in enumerate(points):
        later = above[index:]
        if above[index] and sum(later) * 2 >= len(later):
            return step
    return points[-1][0]
