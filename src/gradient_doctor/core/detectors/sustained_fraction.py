"""The shared logic of dead-unit and saturation warnings: a layer's fraction of stuck units
staying above a threshold for many records in a row."""

from __future__ import annotations

from dataclasses import dataclass

from gradient_doctor.core.arguments import check_float, check_int
from gradient_doctor.core.detectors.protocol import CountedFindings, Standing
from gradient_doctor.core.evidence import TrainingSetup
from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.knowledge.wording import approximately, listing
from gradient_doctor.core.records import StepRecord

# A layer is stuck when more than THRESHOLD of its units are stuck for WINDOW records in
# a row: a single batch of unusual inputs can silence most units for one step.
THRESHOLD = 0.9
WINDOW = 20


@dataclass(frozen=True)
class Stuck:
    """One layer whose fraction of stuck units stayed above the threshold.

    Attributes:
        layer: the layer's name.
        since: the first step of the run of records above the threshold.
        fraction: the latest fraction of stuck units (0 to 1).
    """

    layer: str
    since: int
    fraction: float


class SustainedFractionDetector(CountedFindings):
    """Warns when a `LayerRecord` fraction stays above a threshold for `window` records.

    Subclasses set `FIELD` (the `LayerRecord` field), `CATEGORY`, `UNITS` and `STATE`
    (words for the explanation), `CONSEQUENCE` (one sentence) and `fixes()`.

    Args:
        threshold: float in (0, 1), the fraction above which a layer counts as stuck.
            Defaults to 0.9.
        window: int, records in a row the fraction must stay above the threshold.
            Defaults to 20.
        setup: `TrainingSetup` or None, the user's training settings, so that `fixes()`
            name the actual learning rate and are spelled in the user's framework.
            Defaults to None.

    Raises:
        ValueError: for a `threshold` outside (0, 1) or a `window` below 1.
    """

    FIELD = ""
    CATEGORY = ""
    UNITS = ""  # e.g. "ReLU units"
    STATE = ""  # e.g. "output 0 for every example"
    CONSEQUENCE = ""
    # Said when every stuck layer was already stuck at the first record (before any
    # update could have done it); "" says nothing more.
    FROM_START = ""

    def __init__(
        self,
        threshold: float = THRESHOLD,
        window: int = WINDOW,
        setup: TrainingSetup | None = None,
    ) -> None:
        self._setup = setup or TrainingSetup()
        self._threshold = check_float(threshold, "threshold", 0.0, 1.0)
        self._window = check_int(window, "window", 1)
        self._layers: dict[str, None] = {}  # every layer seen, in record order
        self._streaks: dict[str, tuple[int, int]] = {}  # layer -> (first step, length)
        self._stuck: dict[str, Stuck] = {}
        self._first_step: int | None = None
        # Layers with trainable weights (a weight norm was measured): stuck units in a
        # frozen layer are not a failure of training.
        self._trained: set[str] = set()
        self._latest_step: int | None = None
        self._first_record: int | None = None  # the first record that measured the field

    def fixes(self, from_start: bool = False) -> tuple[Fix, ...]:
        """The remedies, most direct first; `from_start`: every stuck layer was stuck at
        the first record, before any update."""
        raise NotImplementedError

    def observe(self, record: StepRecord) -> None:
        """Take in the layers' fractions of one step; layers without the field are skipped."""
        if not record.layers:
            return
        measured = record.measured_fields()
        weights, fractions = measured.get("weight_norm"), measured.get(self.FIELD)
        if weights:
            self._trained.update(weights)
        if not fractions:  # most records: the layers' gradient norms alone
            return
        self._latest_step = record.step
        if self._first_record is None:
            self._first_record = record.step
        for layer, fraction in fractions.items():
            self._layers.setdefault(layer)
            if fraction <= self._threshold:
                self._streaks.pop(layer, None)
                continue
            since, length = self._streaks.get(layer, (record.step, 0))
            self._streaks[layer] = (since, length + 1)
            if length + 1 >= self._window:
                self._stuck[layer] = Stuck(layer, since, fraction)
                self._changed()
                if self._first_step is None:
                    self._first_step = record.step

    def _build_findings(self) -> list[Finding]:
        """One warning naming the stuck layers, or none."""
        if self._first_step is None:
            return []
        return [self._finding(self._first_step, list(self._stuck))]

    def standing(self) -> list[Standing]:
        """The warning as it stands at the latest record: trained layers still stuck."""
        layers = [
            name
            for name, (_, length) in self._streaks.items()
            if length >= self._window and name in self._trained and name in self._stuck
        ]
        if not layers or self._latest_step is None:
            return []
        since = min(self._streaks[name][0] for name in layers)
        return [Standing(self._finding(since, layers), since, self._latest_step)]

    def _finding(self, step: int, layers: list[str]) -> Finding:
        stuck = tuple(self._stuck[name] for name in self._layers if name in layers)
        from_start = bool(stuck) and all(item.since == self._first_record for item in stuck)
        explanation = self.explain(stuck)
        if from_start and self.FROM_START:
            explanation += f" {self.FROM_START}"
        return Finding(
            category=self.CATEGORY,
            step=step,
            phase="forward",
            origin=None,
            explanation=explanation,
            fixes=self.fixes(from_start),
        )

    def explain(self, stuck: tuple[Stuck, ...]) -> str:
        """E.g. "In 2 layers more than 90% of the ReLU units output 0 for every example,
        for 20 records in a row: `dense_1` (97% since step 120) and `dense_2` (93% since
        step 130). Dead units get no gradient, so they never recover."."""
        where = "1 layer" if len(stuck) == 1 else f"{len(stuck)} layers"
        layers = listing(
            [
                f"`{item.layer}` ({approximately(100 * item.fraction)}% since step {item.since})"
                for item in stuck
            ]
        )
        return (
            f"In {where} more than {approximately(100 * self._threshold)}% of the "
            f"{self.UNITS} {self.STATE}, for {self._window} records in a row: {layers}. "
            f"{self.CONSEQUENCE}"
        )
