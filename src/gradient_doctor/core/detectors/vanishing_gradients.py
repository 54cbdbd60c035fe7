"""Early warning of vanishing gradients: a layer whose gradient is orders of magnitude too small."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

from gradient_doctor.core.arguments import check_float, check_int
from gradient_doctor.core.detectors.protocol import CountedFindings, Standing
from gradient_doctor.core.detectors.sorted_window import SortedWindow
from gradient_doctor.core.evidence import TrainingSetup
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.remedies.history import SCALE_FREE_OPTIMIZERS
from gradient_doctor.core.knowledge.remedies.not_fixes import vanishing_not_fixes
from gradient_doctor.core.knowledge.wording import approximately, listing
from gradient_doctor.core.records import StepRecord

# A layer's gradient norm is judged over its last WINDOW records (so one quiet batch
# is not a finding). It vanishes when its median is below RATIO times the median of the
# other layers' medians (four orders of magnitude), or when its mean is below FLOOR
# while the other layers' median is not: when every layer is below FLOOR the loss is
# flat everywhere (converged or stuck), which is not a problem of gradient flow.
WINDOW = 20
RATIO = 1e-4
FLOOR = 1e-7
# A layer whose median gradient norm is at least this is not vanishing, however far above
# it the other layers' are: they are then the trouble (a GRU's exploding to 2.5e7 beside
# a dense layer's 1600, which moved its kernel from norm 5.6 to 147).
CEILING = 1.0


@dataclass(frozen=True)
class Vanishing:
    """One layer whose gradient vanished.

    Attributes:
        layer: the layer's name.
        step: the step of the last record whose norms were judged.
        norm: the layer's median gradient norm over the window.
        others: the median gradient norm of the other layers over the window.
    """

    layer: str
    step: int
    norm: float
    others: float


class VanishingGradientsDetector(CountedFindings):
    """Warns when a layer's gradient norm stays orders of magnitude below the others'.

    A layer whose gradient norm is exactly 0 over the whole window is left to the
    zero-gradient check, which names the variables and the break in the path.

    Args:
        window: int, records each layer is judged over. Defaults to 20.
        ratio: float, a layer vanishes below this fraction of the other layers'
            median norm. Defaults to 1e-4.
        floor: float, or when its mean norm is below this (while the others' is not).
            Defaults to 1e-7.
        setup: `TrainingSetup` or None, so that the fixes are spelled in the user's
            framework. Defaults to None.

    Raises:
        ValueError: for an argument out of range, e.g. a `ratio` of 1 or more.
    """

    def __init__(
        self,
        window: int = WINDOW,
        ratio: float = RATIO,
        floor: float = FLOOR,
        setup: TrainingSetup | None = None,
    ) -> None:
        self._setup = setup or TrainingSetup()
        self._window = check_int(window, "window", 3)
        self._ratio = check_float(ratio, "ratio", 0.0, 1.0)
        self._floor = check_float(floor, "floor")
        # Each layer's last norms, kept sorted for their running median.
        self._series: dict[str, SortedWindow] = {}
        self._vanished: dict[str, Vanishing] = {}
        self._first_step: int | None = None
        # Layers judged vanishing at the latest evaluation -> the first step of their
        # unbroken run of such evaluations (a layer not judged then is not standing).
        self._standing_since: dict[str, int] = {}
        self._judged_at: int | None = None
        # The windows were judged (at least two full) and have not changed since.
        self._judged = False

    def observe(self, record: StepRecord) -> None:
        """Take in the layers' gradient norms of one step; skips missing and non-finite ones."""
        norms = record.measured("grad_norm") if record.layers else None
        if not norms:
            self._judge_again(record.step)
            return
        for layer, norm in norms.items():
            series = self._series.get(layer)
            if series is None:
                series = self._series[layer] = SortedWindow(self._window)
            series.append(norm)
        self._judged = False
        full, medians = {}, {}
        for layer, series in self._series.items():
            if series.full and series.any_nonzero():
                full[layer], medians[layer] = series, series.median()
        if len(full) < 2:
            return
        ordered = sorted(medians.values())
        standing = {}
        if not self._none_can_vanish(ordered, full.values()):
            for layer, series in full.items():
                others = _median_without(ordered, medians[layer])
                low = medians[layer] < self._ratio * others and medians[layer] < CEILING
                floored = (
                    not low and others >= self._floor and sum(series) / len(series) < self._floor
                )
                if low or floored:
                    self._vanished[layer] = Vanishing(layer, record.step, medians[layer], others)
                    self._changed()
                    standing[layer] = self._standing_since.get(layer, record.step)
                    if self._first_step is None:
                        self._first_step = record.step
        self._standing_since, self._judged_at = standing, record.step
        self._judged = True

    def _none_can_vanish(self, ordered: list[float], full: Iterable[SortedWindow]) -> bool:
        """True when no layer can be judged vanishing, from bounds alone (most records).

        No median is below `ratio` times the others' median when the smallest is not
        below `ratio` times the largest; no mean is below `floor` when every window's
        smallest value is at least twice it (a sum of values rounds to at least their
        count times the smallest, less a few units in the last place).
        """
        if ordered[0] < self._ratio * ordered[-1]:
            return False
        least = 2.0 * self._floor
        return all(series.smallest() >= least for series in full)

    def _judge_again(self, step: int) -> None:
        """Judge the unchanged windows at a record without gradient norms: the verdict
        is the last one (the same windows give the same medians), now as of `step`."""
        if self._judged:
            self._judged_at = step

    def _build_findings(self) -> list[Finding]:
        """One warning naming the layers whose gradients vanish, or none."""
        if self._first_step is None:
            return []
        return [self._finding(self._first_step, list(self._vanished))]

    def standing(self) -> list[Standing]:
        """The warning as it stands at the latest evaluation (the layers still vanishing)."""
        if not self._standing_since or self._judged_at is None:
            return []
        since = min(self._standing_since.values())
        return [Standing(self._finding(since, list(self._standing_since)), since, self._judged_at)]

    def _finding(self, step: int, layers: list[str]) -> Finding:
        return Finding(
            category="vanishing_gradients",
            step=step,
            phase=None,
            origin=None,
            explanation=explain(
                tuple(self._vanished[name] for name in self._series if name in layers),
                self._window,
                self._setup.optimizer,
            ),
            not_fixes=vanishing_not_fixes(),
            fixes=(
                remedies.better_init(self._setup.framework),
                remedies.batch_normalization("each hidden layer", self._setup.framework),
                remedies.activation_change(
                    "relu", "it does not saturate for positive inputs", self._setup.framework
                ),
            ),
        )


def _median_without(ordered: list[float], value: float) -> float:
    """The median of the sorted `ordered` less one occurrence of `value` (one of them),
    as `forecast.median` gives it for those values in any order."""
    skip = bisect_left(ordered, value)
    count = len(ordered) - 1
    middle = count // 2
    upper = ordered[middle] if middle < skip else ordered[middle + 1]
    if count % 2:
        return upper
    lower = ordered[middle - 1] if middle - 1 < skip else ordered[middle]
    return 0.5 * (lower + upper)


def explain(vanished: tuple[Vanishing, ...], window: int, optimizer: str | None = None) -> str:
    """Name the layers and compare the smallest gradient with the others'.

    Example: "Gradients vanish in layer `dense`: its gradient norm has a median of
    3.1e-09 over the last 20 records, 1.2e-06 times the median 0.0026 of the other
    layers, so its weights barely move." Under an `optimizer` that divides each step
    by the gradient's own size (Adam, RMSprop) the weights do move: the warning is of
    a faint signal from the loss.
    """
    worst = min(vanished, key=lambda item: item.norm / item.others)
    names = listing([f"`{item.layer}`" for item in vanished])
    where = f"layer {names}" if len(vanished) == 1 else f"{len(vanished)} layers ({names})"
    its = "its" if len(vanished) == 1 else f"`{worst.layer}`'s"
    return (
        f"Gradients vanish in {where}: {its} gradient norm has a median of "
        f"{approximately(worst.norm)} over the last {window} records, "
        f"{approximately(worst.norm / worst.others)} times the median "
        f"{approximately(worst.others)} of the other layers, {_what_it_does(optimizer)}"
    )


def _what_it_does(optimizer: str | None) -> str:
    """What a vanishing gradient does to the weights under `optimizer`."""
    if optimizer in SCALE_FREE_OPTIMIZERS:
        return (
            f"so the loss's signal reaches its weights faint ({optimizer} divides each step "
            "by the gradient's own running size, so they still move by about its learning "
            "rate, but a gradient this small is easily swamped by noise)."
        )
    return "so its weights barely move."
