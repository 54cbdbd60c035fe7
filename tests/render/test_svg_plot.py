"""Inline SVG line plots: ticks, scales, limits and markers, always well-formed XML."""

import random
import re
import xml.etree.ElementTree as ElementTree

import pytest

from gradient_doctor.core.run_series import Series
from gradient_doctor.render.svg_plot import Marker, line_plot, log_ticks, nice_ticks, tick_labels


def series(values, steps=None, **changes):
    steps = tuple(range(len(values))) if steps is None else steps
    return Series(
        **{"name": "s", "title": "s", "group": "G", **changes}, steps=steps, values=values
    )


def parse(svg):
    return ElementTree.fromstring(svg)


def y_tick_texts(svg):
    return re.findall(r'class="tick"[^>]*text-anchor="end">([^<]*)<', svg)


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0, 88.72, [0, 20, 40, 60, 80]),
        (-1.3, 1.3, [-1, -0.5, 0, 0.5, 1]),
        (0, 1200, [0, 200, 400, 600, 800, 1000, 1200]),
        (3, 3.0004, [3, 3.0001, 3.0002, 3.0003, 3.0004]),
    ],
)
def test_nice_ticks_are_round_and_inside_the_range(low, high, expected):
    ticks = nice_ticks(low, high)
    assert all(low <= t <= high for t in ticks)
    assert ticks == pytest.approx(expected)


def test_log_ticks_are_decades_and_their_multiples_on_short_ranges():
    assert log_ticks(0.3, 40) == [0.5, 1, 2, 5, 10, 20]
    assert log_ticks(1e-6, 1e6)[:2] == [1e-6, 1e-4]  # a long range keeps every other decade
    narrow = log_ticks(0.3, 0.45)  # no 1, 2 or 5 times a power of ten inside
    assert len(narrow) >= 2 and all(0.3 <= t <= 0.45 for t in narrow)
    assert "<svg" in line_plot("G", [series((0.31, 0.44), scale="log")])


def test_log_scale_when_every_value_is_positive_else_linear():
    growing = line_plot("G", [series((0.01, 1.0, 100.0), scale="log")])
    assert y_tick_texts(growing) == ["0.01", "0.1", "1", "10", "100"]
    with_zero = line_plot("G", [series((0.0, 1.0, 100.0), scale="log")])
    assert "0" in y_tick_texts(with_zero) and "0.01" not in y_tick_texts(with_zero)


def test_the_limit_is_inside_the_value_axis_and_drawn_dashed():
    svg = line_plot("Headroom", [series((1.0, 2.0, 3.0), limit=88.72)])
    parse(svg)
    assert "limit 88.72" in svg
    assert "80" in y_tick_texts(svg)  # the axis reaches up to the limit
    (line,) = re.findall(r'<line class="limit-line"[^>]*>', svg)
    (y,) = set(re.findall(r'y[12]="([\d.]+)"', line))
    data_ys = [float(p.split(",")[1]) for p in re.search(r'points="([^"]*)"', svg).group(1).split()]
    assert float(y) < min(data_ys)  # above every point: smaller SVG y is higher


def test_markers_extend_the_step_axis_and_carry_their_kind():
    svg = line_plot(
        "G",
        [series((1.0, 2.0), steps=(0, 100))],
        [Marker(120, "forward_overflow at step 120", "problem"), Marker(300, "f", "forecast")],
    )
    parse(svg)
    assert 'class="marker marker-problem"' in svg and 'class="marker marker-forecast"' in svg
    assert ">300<" in svg or ">250<" in svg  # the step axis reaches the forecast
    xs = [float(x) for x in re.findall(r'class="marker marker-\w+" x1="([\d.]+)"', svg)]
    assert xs[0] < xs[1]


def test_one_point_is_a_dot_and_no_points_say_so():
    assert "<circle" in line_plot("G", [series((5.0,))])
    empty = line_plot("G", [series(())])
    parse(empty)
    assert "no values recorded" in empty


def test_marker_kind_is_checked():
    with pytest.raises(ValueError, match="`kind` must be one of .*Received: kind='note'"):
        Marker(1, "x", "note")


def test_tick_labels_show_the_digits_that_tell_ticks_apart():
    assert tick_labels([3.0, 3.0001, 3.0002]) == ["3", "3.0001", "3.0002"]
    assert tick_labels([0.0, 20.0, 40.0]) == ["0", "20", "40"]
    assert len(set(tick_labels([100000.0, 101000.0, 102000.0]))) == 3


def test_any_finite_values_make_a_well_formed_plot():
    rng = random.Random(0)
    for _ in range(300):
        size = rng.choice([1, 2, 5, 50])
        centre = rng.choice([0.0, 1e-30, 1e-3, 0.4, 1.0, 88.0, 1e6, 3e38, -5.0])
        spread = rng.choice([0.0, 1e-12, 1e-3, 1.0, 1e3]) * max(abs(centre), 1.0)
        values = tuple(centre + spread * rng.random() for _ in range(size))
        steps = tuple(sorted(rng.sample(range(10**6), size)))
        scale = rng.choice(["linear", "log"])
        limit = rng.choice([None, 0.0, 1.0, 88.72])
        markers = [Marker(rng.randrange(10**6), "m", "problem")] * rng.choice([0, 1, 4])
        svg = line_plot("G", [series(values, steps, scale=scale, limit=limit)], markers)
        parse(svg)
        assert "nan" not in svg.lower()
