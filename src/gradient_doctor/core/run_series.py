"""What was watched over a whole run, as named series of bounded size, for plots and exports.

Adapters hand `StepRecord`s to a `RunSeries`; it keeps, per named quantity, an evenly
thinned history (`ThinnedHistory`) plus the latest point, so memory stays bounded over
millions of steps while a plot still spans the whole run and reaches its last step.
Renderers (HTML, TensorBoard) draw `Series` by their `group` and know nothing of where
they came from: a new per-layer quantity is one more row in `LAYER_SERIES`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gradient_doctor.core.arguments import check_int
from gradient_doctor.core.detectors.headroom_remedies import source_of
from gradient_doctor.core.findings import Origin
from gradient_doctor.core.knowledge.wording import line_ref, op_place
from gradient_doctor.core.records import HeadroomSample, StepRecord
from gradient_doctor.core.thinned_history import ThinnedHistory

# At most this many points per series (thinning keeps half to all of them).
DEFAULT_POINTS = 400
SCALES = ("linear", "log")

# A `LayerRecord` field -> (group, unit, scale) of its per-layer series, for every field
# (their series are made in the fields' order). Gradient and weight norms span orders
# of magnitude (an explosion is exponential): log scale.
LAYER_SERIES: dict[str, tuple[str, str, str]] = {
    "grad_norm": ("Gradient norm", "L2 norm", "log"),
    "weight_norm": ("Weight norm", "L2 norm", "log"),
    "update_ratio": ("Update / weight ratio", "ratio", "log"),
    "activation_max_abs": ("Activation max |value|", "|value|", "linear"),
    "dead_fraction": ("Dead units", "fraction", "linear"),
    "saturated_fraction": ("Saturated units", "fraction", "linear"),
}

# How a risky op's measured extreme is named, by `HeadroomSample.kind`.
HEADROOM_MEASURES = {
    "max_input": "largest input",
    "min_input": "smallest input",
    "min_abs_denominator": "smallest |denominator|",
    "abs_input": "largest |input|",
    "max_abs_value": "largest |value|",
}


@dataclass(frozen=True)
class Series:
    """One watched quantity over the run's steps, thinned to a bounded number of points.

    Attributes:
        name: str, a stable id, also the TensorBoard tag, e.g. "loss",
            "grad_norm/global", "grad_norm/dense_1", "headroom/message_passing/Exp".
        title: str, how a reader names the line, e.g. "global" or "dense_1".
        group: str, the plot the series belongs to; series of one group share axes,
            e.g. "Gradient norm" or "Headroom: Exp in layer `mp` (train.py:42)".
        unit: str, what the values measure, e.g. "largest input" ("" when plain).
        scale: str, "linear" or "log": how the values are best drawn.
        limit: float or None, a value the quantity must not reach (a risky op's
            overflow threshold or domain edge), drawn as a line.
        about: str or None, the op (`Origin.op_name`) or layer the series measures,
            so a finding about it can be shown on its plot.
        steps: the 0-based optimizer steps of the points, increasing.
        values: the values at those steps.
    """

    name: str
    title: str
    group: str
    unit: str = ""
    scale: str = "linear"
    limit: float | None = None
    about: str | None = None
    steps: tuple[int, ...] = ()
    values: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ValueError(f"`scale` must be one of {SCALES}. Received: scale={self.scale!r}")
        if len(self.steps) != len(self.values):
            raise ValueError(
                "`steps` and `values` must have the same length. Received: "
                f"{len(self.steps)} steps and {len(self.values)} values"
            )


LOSS = Series("loss", "loss", "Loss")
# With several optimizers, each objective's loss: "loss/objective1", in update order.
OBJECTIVE_LOSS = "loss/objective"


def objective_loss_series(number: int) -> Series:
    """The series of the loss of the step's `number`-th update (1-based), with several
    optimizers (a GAN's critic and generator), drawn beside the step's loss."""
    return Series(f"{OBJECTIVE_LOSS}{number}", f"objective {number}", "Loss")


GLOBAL_GRAD_NORM = Series("grad_norm/global", "global", "Gradient norm", "L2 norm", "log")


# How series are ordered in a report, by the start of their names: what a reader looks
# at first (the loss, then gradient norms, the global one before the layers'), first.
SERIES_ORDER = (
    LOSS.name,
    GLOBAL_GRAD_NORM.name,
    "grad_norm/",
    "headroom/",
    *(f"{field}/" for field in LAYER_SERIES if field != "grad_norm"),
)


@dataclass
class _Track:
    """One series being collected: its description, its thinned points and its last one."""

    shape: Series  # the description; `steps` and `values` stay empty
    history: ThinnedHistory[tuple[int, float]]
    last: tuple[int, float]


class RunSeries:
    """Collects the watched quantities of a run as bounded series.

    Args:
        points: int, the most points kept per series (at least 2); the whole run is
            always covered, at a resolution of `points / 2` to `points` points.
            Defaults to 400.

    Raises:
        ValueError: for `points` below 2.

    Example:
        >>> series = RunSeries()
        >>> series.observe(StepRecord(0, loss=2.3, grad_norm=0.7))
        >>> [s.name for s in series.snapshot()]
        ['loss', 'grad_norm/global']
    """

    def __init__(self, points: int = DEFAULT_POINTS) -> None:
        self._points = check_int(points, "points", 2)
        self._tracks: dict[str, _Track] = {}

    def add(self, description: Series, step: int, value: float) -> None:
        """Append one point to the series named `description.name`, creating it if new.

        Non-finite values are left out (a plot has nowhere to put them; the report's
        findings say when and where they appeared), and so is a point at or before the
        series' latest step (a series runs forward; the first value of a step stays).
        A series keeps the description it was first added with, except its `limit`,
        which follows the latest point.

        Args:
            description: Series, the series' name, title, group, unit, scale, limit
                and subject (its `steps` and `values` are ignored).
            step: int, the optimizer step of the point.
            value: float, the value at that step.
        """
        value = float(value)
        if not math.isfinite(value):
            return
        track = self._tracks.get(description.name)
        if track is not None:
            self._extend(track, step, value, description.limit)
            return
        shape = replace(description, steps=(), values=())
        track = _Track(shape, ThinnedHistory(self._points), (step, value))
        self._tracks[description.name] = track
        track.history.append((step, value))

    def _extend(self, track: _Track, step: int, value: float, limit: float | None) -> None:
        """Append a finite point to a series already collected (see `add`)."""
        if step <= track.last[0]:
            return
        if limit != track.shape.limit:
            track.shape = replace(track.shape, limit=limit)
        point = (step, value)
        track.history.append(point)
        track.last = point

    def observe(self, record: StepRecord) -> None:
        """Add every measured value of one step: loss, gradient norms, layers, headroom.

        A series already collected takes the point without its description being made
        again (a record a step, a per-layer series per layer and field).
        """
        step, tracks = record.step, self._tracks
        if record.loss is not None:
            self.add(LOSS, step, record.loss)
        for number, loss in enumerate(record.objective_losses, 1):
            if loss is not None:
                self.add(objective_loss_series(number), step, loss)
        if record.grad_norm is not None:
            self.add(GLOBAL_GRAD_NORM, step, record.grad_norm)
        if record.layers:
            for field, values in record.measured_fields().items():
                group, unit, scale = LAYER_SERIES[field]  # every field has a row
                for layer, value in values.items():
                    name = f"{field}/{layer}"
                    track = tracks.get(name)
                    if track is None:
                        self.add(Series(name, layer, group, unit, scale, about=layer), step, value)
                    else:
                        self._extend(track, step, value, None)
        for sample in record.headroom:
            track = tracks.get(f"headroom/{sample.key}")
            if track is None:
                self.add(headroom_series(sample), step, sample.value)
                continue
            value = float(sample.value)
            if math.isfinite(value):
                self._extend(track, step, value, sample.limit)

    def snapshot(self) -> tuple[Series, ...]:
        """Every series so far, each ending at its latest point.

        Ordered as plots are read (`SERIES_ORDER`: the loss, gradient norms, headroom,
        then the other per-layer statistics), and in the order first added within each.
        """
        result = []
        for track in sorted(self._tracks.values(), key=lambda t: _rank(t.shape.name)):
            points = list(track.history.items())
            if points[-1] != track.last:
                points.append(track.last)
            steps, values = zip(*points)
            result.append(replace(track.shape, steps=steps, values=values))
        return tuple(result)


def _rank(name: str) -> int:
    """The place of a series' name among `SERIES_ORDER` (unknown names go last)."""
    return next(
        (rank for rank, prefix in enumerate(SERIES_ORDER) if name.startswith(prefix)),
        len(SERIES_ORDER),
    )


def headroom_series(sample: HeadroomSample) -> Series:
    """Describe the series of one risky op's measured extreme, with its limit.

    Args:
        sample: HeadroomSample, one reading of the op.

    Returns:
        A Series (without points) named "headroom/<op key>", grouped in a plot of
        its own titled "Headroom: Exp in layer `mp` (train.py:42)".
    """
    return Series(
        name=f"headroom/{sample.key}",
        title=HEADROOM_MEASURES[sample.kind],
        group=f"Headroom: {headroom_place(sample)}",
        unit=f"{HEADROOM_MEASURES[sample.kind]} ({sample.dtype})",
        limit=sample.limit,
        about=sample.key,
    )


def headroom_place(sample: HeadroomSample) -> str:
    """Name a risky op and where it is: "Exp in layer `mp` (train.py:42)"."""
    source = source_of(sample)
    origin = Origin(sample.op, sample.key, sample.layer, source, None, (), ())
    where = f" ({line_ref(source)})" if source is not None else ""
    return f"{op_place(origin)}{where}"
