"""Line plots over steps as inline SVG text: no JavaScript, no library, nothing to download."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from gradient_doctor.core.knowledge.wording import format_number
from gradient_doctor.core.run_series import Series

WIDTH, HEIGHT = 880, 280
# Room around the plotting area: tick labels on the left, the step axis below, the
# legend above. The visible title is the page's (it wraps there; SVG text does not).
LEFT, RIGHT, TOP, BOTTOM = 72, 24, 30, 40
LEGEND_Y = 16
# Line colours, one per series of a plot (colour-blind friendly, Okabe-Ito).
PALETTE = ("#0072b2", "#009e73", "#cc79a7", "#56b4e9", "#e69f00", "#000000", "#d55e00")
MARKER_KINDS = ("problem", "warning", "forecast")
TICKS = 5
# Marker labels take up to this many rows at the top of the plotting area, above the data,
# so they never cross a line or a limit's label.
LABEL_ROWS, ROW_HEIGHT = 3, 13


@dataclass(frozen=True)
class Marker:
    """A step worth pointing at on a plot: a vertical line with a label.

    Attributes:
        step: int, the optimizer step.
        label: str, e.g. "forward_overflow at step 1174".
        kind: str, "problem", "warning" or "forecast" (how the line is drawn).
    """

    step: int
    label: str
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in MARKER_KINDS:
            raise ValueError(f"`kind` must be one of {MARKER_KINDS}. Received: kind={self.kind!r}")


@dataclass(frozen=True)
class _Axis:
    """A linear or logarithmic map from data values to pixels."""

    low: float
    high: float
    start: float  # the pixel of `low`
    end: float  # the pixel of `high`
    log: bool = False

    def pixel(self, value: float) -> float:
        low, high, value = (
            (math.log10(self.low), math.log10(self.high), math.log10(value))
            if self.log
            else (self.low, self.high, value)
        )
        return self.start + (value - low) / (high - low) * (self.end - self.start)


def line_plot(
    title: str,
    series: Sequence[Series],
    markers: Sequence[Marker] = (),
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """Draw series over steps as one SVG element, with their limits and marked steps.

    The step axis spans every point and marker. The value axis is logarithmic when
    every series asks for it and every value (and limit) is positive, else linear;
    it always includes the series' limits, drawn as dashed red lines.

    Args:
        title: str, the plot's title, as the SVG's `<title>` (shown as a tooltip and
            read by screen readers; escaped here, like every text).
        series: the series to draw, sharing both axes; empty series are skipped.
        markers: steps to point at (problems, warnings, forecasts).
        width: int, the SVG's width in pixels. Defaults to 880.
        height: int, the SVG's height in pixels. Defaults to 280.

    Returns:
        The text of an `<svg>` element with class "plot".
    """
    drawn = [s for s in series if s.steps]
    limits = [s.limit for s in drawn if s.limit is not None and math.isfinite(s.limit)]
    values = [v for s in drawn for v in s.values] + limits
    steps = [step for s in drawn for step in s.steps] + [m.step for m in markers]
    parts = [
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img">',
        f"<title>{escape(title)}</title>",
    ]
    if not values:
        parts.append(f'<text x="{LEFT}" y="{height / 2}">no values recorded</text></svg>')
        return "".join(parts)
    log = all(s.scale == "log" for s in drawn) and min(values) > 0
    x = _Axis(*_padded(min(steps), max(steps), False, 0.0), LEFT, width - RIGHT)
    band = ROW_HEIGHT * min(len(markers), LABEL_ROWS) + (4 if markers else 0)
    y = _Axis(*_padded(min(values), max(values), log, 0.06), height - BOTTOM, TOP + band, log)
    parts += _axes(x, y, width, height)
    units = {s.unit for s in drawn}
    if len(units) == 1 and "" not in units:
        parts.append(
            f'<text class="axis-name" transform="rotate(-90)" x="{-(TOP + height - BOTTOM) / 2}" '
            f'y="14" text-anchor="middle">{escape(units.pop())}</text>'
        )
    for index, one in enumerate(drawn):
        parts.append(_polyline(one, x, y, PALETTE[index % len(PALETTE)]))
    for limit in sorted(set(limits)):
        parts.append(_limit_line(limit, x, y))
    for index, marker in enumerate(sorted(markers, key=lambda m: m.step)):
        parts.append(_marker_line(marker, x, y, index))
    parts.append(_legend(drawn, bool(limits), width))
    parts.append("</svg>")
    return "".join(parts)


def _padded(low: float, high: float, log: bool, margin: float) -> tuple[float, float]:
    """The range to draw: widened when empty, and by `margin` of its span on each side."""
    if log:
        low, high = math.log10(low), math.log10(high)
    magnitude = max(abs(low), abs(high))
    if high - low <= 1e-9 * magnitude or high == low:  # flat: 1% around it (or 1)
        half = 0.01 * magnitude or 1.0
        low, high = low - half, high + half
    span = high - low
    low, high = low - margin * span, high + margin * span
    return (10**low, 10**high) if log else (low, high)


def nice_ticks(low: float, high: float, count: int = TICKS) -> list[float]:
    """Round values (1, 2 or 5 times a power of ten apart) between `low` and `high`,
    as close to `count` of them as such a spacing allows.

    Args:
        low: float, the start of the range.
        high: float, the end of the range (above `low`).
        count: int, about how many ticks are wanted. Defaults to 5.

    Returns:
        About `count` increasing values within [low, high].

    Example:
        >>> nice_ticks(0, 88.72)
        [0.0, 20.0, 40.0, 60.0, 80.0]
    """
    span = high - low
    if not span > 0:
        return [low]
    power = 10 ** math.floor(math.log10(span / max(count, 1)))
    step = min((m * power for m in (1, 2, 5, 10)), key=lambda s: (abs(span / s - count), s))
    first = math.ceil(low / step)
    ticks = [(first + i) * step for i in range(int((high - low) / step) + 2)]
    return [float(f"{t:.12g}") for t in ticks if low <= t <= high]  # without float noise


def log_ticks(low: float, high: float) -> list[float]:
    """Powers of ten between `low` and `high`, with 2 and 5 times them over short ranges
    (evenly spaced round values when the range holds fewer than two of those).

    Example:
        >>> log_ticks(0.3, 40)
        [0.5, 1, 2, 5, 10, 20]
    """
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    multiples = (1,) if len(decades) > 4 else (1, 2, 5)
    kept = [m * 10.0**d for d in decades for m in multiples if low <= m * 10.0**d <= high]
    if len(kept) < 2:  # a range narrower than from 1 to 2 (e.g. 0.3 to 0.45)
        return nice_ticks(low, high)
    every = math.ceil(len(kept) / 8)  # a long range keeps every other decade, or fewer
    return [int(t) if t == int(t) and t >= 1 else t for t in kept[::every]]


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """Label ticks compactly, with as many digits as it takes to tell them apart.

    Example:
        >>> tick_labels([3.0, 3.0001, 3.0002])
        ['3', '3.0001', '3.0002']
    """
    for digits in range(4, 16):
        labels = [format_number(tick, digits) for tick in ticks]
        if len(set(labels)) == len(labels):
            return labels
    return [f"{tick:.15g}" for tick in ticks]  # beyond format_number's exponent notation


def _axes(x: _Axis, y: _Axis, width: int, height: int) -> list[str]:
    """The frame, grid lines and tick labels of both axes, and the step axis' name."""
    parts = [
        f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{width - LEFT - RIGHT}" '
        f'height="{height - TOP - BOTTOM}"/>'
    ]
    y_ticks = log_ticks(y.low, y.high) if y.log else nice_ticks(y.low, y.high)
    for tick, label in zip(y_ticks, tick_labels(y_ticks)):
        py = y.pixel(tick)
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{width - RIGHT}" y1="{py:.1f}" y2="{py:.1f}"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">'
            f"{escape(label)}</text>"
        )
    x_ticks = nice_ticks(x.low, x.high)
    for tick, label in zip(x_ticks, tick_labels(x_ticks)):
        px = x.pixel(tick)
        parts.append(
            f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{TOP}" y2="{height - BOTTOM}"/>'
            f'<text class="tick" x="{px:.1f}" y="{height - BOTTOM + 16}" text-anchor="middle">'
            f"{escape(label)}</text>"
        )
    parts.append(
        f'<text class="axis-name" x="{(LEFT + width - RIGHT) / 2}" y="{height - 6}" '
        'text-anchor="middle">step</text>'
    )
    return parts


def _polyline(series: Series, x: _Axis, y: _Axis, colour: str) -> str:
    """One series as a polyline (a single point as a dot)."""
    points = [(x.pixel(step), y.pixel(value)) for step, value in zip(series.steps, series.values)]
    name = escape(series.name, quote=True)
    if len(points) == 1:
        ((px, py),) = points
        return (
            f'<circle class="series-line" data-series="{name}" cx="{px:.1f}" cy="{py:.1f}" '
            f'r="3" fill="{colour}"/>'
        )
    coordinates = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    return (
        f'<polyline class="series-line" data-series="{name}" fill="none" stroke="{colour}" '
        f'points="{coordinates}"/>'
    )


def _limit_line(limit: float, x: _Axis, y: _Axis) -> str:
    """A dashed red line at a limit, labelled with its value."""
    py = y.pixel(limit)
    return (
        f'<line class="limit-line" x1="{x.start}" x2="{x.end}" y1="{py:.1f}" y2="{py:.1f}"/>'
        f'<text class="limit-label" x="{x.start + 4}" y="{py - 4:.1f}">'
        f"limit {escape(format_number(limit))}</text>"
    )


def _marker_line(marker: Marker, x: _Axis, y: _Axis, index: int) -> str:
    """A vertical line at a marked step; labels are staggered so near ones stay legible."""
    px = x.pixel(marker.step)
    label_y = TOP + ROW_HEIGHT * (1 + index % LABEL_ROWS) - 2
    # A label near the right edge is written leftwards so it stays inside the plot.
    right = px > x.start + 0.6 * (x.end - x.start)
    anchor, dx = ("end", -4) if right else ("start", 4)
    return (
        f'<line class="marker marker-{marker.kind}" x1="{px:.1f}" x2="{px:.1f}" '
        f'y1="{TOP}" y2="{y.start}"/>'
        f'<text class="marker-label marker-{marker.kind}-label" x="{px + dx:.1f}" '
        f'y="{label_y:.1f}" text-anchor="{anchor}">{escape(marker.label)}</text>'
    )


def _legend(series: Sequence[Series], has_limit: bool, width: int) -> str:
    """A row above the plotting area naming each line's colour (and the limit's dashes)."""
    entries = [(PALETTE[i % len(PALETTE)], s.title, "") for i, s in enumerate(series)]
    if has_limit:
        entries.append(("#d62728", "limit", ' stroke-dasharray="6 4"'))
    parts, px = ['<g class="legend">'], float(LEFT)
    for colour, text, dash in entries:
        if px > width - RIGHT - 60:
            break
        parts.append(
            f'<line x1="{px:.0f}" x2="{px + 18:.0f}" y1="{LEGEND_Y}" y2="{LEGEND_Y}" '
            f'stroke="{colour}" '
            f'stroke-width="2"{dash}/>'
            f'<text class="legend-label" x="{px + 22:.0f}" y="{LEGEND_Y + 4}">{escape(text)}</text>'
        )
        px += 22 + 7 * len(text) + 18
    parts.append("</g>")
    return "".join(parts)
