"""The HTML report: self-contained, escaped, every finding's details, plots with markers."""

import dataclasses
import re
import xml.etree.ElementTree as ElementTree
from html import escape

import pytest

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.records import HeadroomSample, StepRecord
from gradient_doctor.core.report import Report
from gradient_doctor.core.run_series import RunSeries
from gradient_doctor.render.html_report import plot_markers, render_html, write_html_report

HOSTILE = 'w = tf.exp(s) if a < b and c > d else "</pre><script>alert(1)</script>"'


def watched_series(steps=200, key="message_passing/Exp"):
    """Loss, gradient norm every step and one Exp's headroom every 10 steps."""
    collected = RunSeries()
    for step in range(steps):
        headroom = ()
        if step % 10 == 0:
            where = ("message_passing", "train.py", 42, HOSTILE)
            headroom = (
                HeadroomSample(key, "Exp", *where, "float32", "max_input", 20 + 0.3 * step, 88.72),
            )
        collected.observe(
            StepRecord(step, loss=1 / (1 + step), grad_norm=0.1 * 1.01**step, headroom=headroom)
        )
    return collected.snapshot()


@pytest.fixture
def full_report(problem_report, exp_problem):
    origin = dataclasses.replace(
        exp_problem.origin,
        source=SourceLine("train.py", 42, HOSTILE),
        input_values=((712.4, 88.9, -3.1),),
    )
    hostile = dataclasses.replace(exp_problem, step=199, origin=origin)
    return dataclasses.replace(
        problem_report, problems=(hostile, *problem_report.problems[1:]), series=watched_series()
    )


def svgs(page):
    return re.findall(r"<svg.*?</svg>", page, flags=re.S)


def test_the_page_needs_nothing_from_the_network(full_report):
    page = render_html(full_report)
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page
    assert "<link" not in page and "@import" not in page and "src=" not in page
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls == {"http://www.w3.org/2000/svg"}  # the SVG namespace, never fetched


def test_user_text_is_escaped(full_report):
    page = render_html(full_report)
    assert "<script>alert(1)</script>" not in page
    assert escape(HOSTILE) in page
    for svg in svgs(page):  # every plot is well-formed XML even with hostile titles
        ElementTree.fromstring(svg)


def test_each_problem_shows_where_its_values_why_and_what_to_do(full_report):
    page = render_html(full_report)
    assert "forward_overflow at step 199" in page
    for text in ("Exp", "message_passing/Exp", "message_passing", "train.py:42"):
        assert f"<dd>{text}</dd>" in page
    assert "712.4, 88.9, -3.1" in page  # input values
    assert "min -3.1  max 712.4" in page
    assert escape(full_report.problems[0].explanation) in page
    assert "gradient_clipping" in page and "before any gradient" in page
    assert "w = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))" in page
    assert "verdict-yes" in page and "replayed 200 steps from step 1829: all finite" in page
    assert "<dd>Sqrt</dd>" in page  # the backward problem names the forward op
    assert page.index("Problems") < page.index("Warnings") < page.index("Over the run")


def test_a_warning_shows_its_headroom_and_forecast(full_report):
    page = render_html(full_report)
    warnings = page[page.index('id="warnings"') : page.index('id="plots"')]
    assert "value 61.3 of limit 88.72" in warnings
    assert "limit expected near step 140" in warnings
    assert 'class="finding warning"' in warnings


def test_disconnected_variables_and_the_break_are_shown(disconnected_problem):
    page = render_html(Report("gan.py", 3, problems=(disconnected_problem,)))
    assert "generator/dense/kernel and generator/dense/bias" in page
    assert "<code>ArgMax</code>" in page
    assert "gan.py:88" in page


def test_one_plot_per_group_with_series_limit_and_markers(full_report):
    page = render_html(full_report)
    plots = svgs(page)
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", page)
    assert captions[:2] == ["Loss", "Gradient norm"]
    assert captions[2].startswith("Headroom: Exp in layer `message_passing` (train.py:42)")
    assert len(plots) == 3
    loss, norm, headroom = plots
    assert 'data-series="loss"' in loss and "limit-line" not in loss
    assert 'data-series="grad_norm/global"' in norm
    assert 'data-series="headroom/message_passing/Exp"' in headroom
    assert "limit-line" in headroom and "limit 88.72" in headroom
    for plot in plots:  # every problem is marked on every plot
        assert "forward_overflow at step 199" in plot
        assert "backward_singularity at step 7" in plot
    assert "limit forecast at step 140" in headroom
    assert "limit forecast" not in loss  # the warning is about the Exp plot's op


def test_a_polyline_has_one_point_per_kept_step(full_report):
    headroom = svgs(render_html(full_report))[2]
    points = re.search(r'data-series="headroom[^"]*"[^>]*points="([^"]*)"', headroom).group(1)
    assert len(points.split()) == 20


def test_warning_without_an_origin_is_marked_on_every_plot(full_report, make_finding):
    trend = make_finding("warning", origin=None, step=150, category="exploding_gradients")
    report = dataclasses.replace(full_report, warnings=(trend,))
    for members in ([s] for s in report.series):
        kinds = [m.kind for m in plot_markers(report, members)]
        assert "warning" in kinds and "forecast" not in kinds


def test_a_healthy_report_without_series_still_renders(healthy_report):
    page = render_html(healthy_report)
    assert 'class="status status-healthy"' in page
    assert "no series recorded" in page
    assert "<svg" not in page


def test_the_script_error_is_shown(healthy_report):
    report = dataclasses.replace(healthy_report, script_error="ValueError: bad <shape>")
    page = render_html(report)
    assert "status-problem" in page
    assert "ValueError: bad &lt;shape&gt;" in page


def test_write_html_report_creates_the_folder(tmp_path, full_report):
    path = tmp_path / "out" / "report.html"
    write_html_report(full_report, path)
    assert path.read_text(encoding="utf-8") == render_html(full_report)
    assert [p.name for p in path.parent.iterdir()] == ["report.html"]
