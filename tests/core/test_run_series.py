"""The run's series: bounded over long runs, named for plots, fed by records (no TensorFlow)."""

import dataclasses
import math

import pytest

from gradient_doctor.core.records import HeadroomSample, LayerRecord, StepRecord
from gradient_doctor.core.run_series import LAYER_SERIES, RunSeries, Series, headroom_series


def exp_sample(value, limit=88.72, key="mp/Exp"):
    return HeadroomSample(
        key=key,
        op="Exp",
        layer=key.split("/")[0],
        file="train.py",
        line=42,
        code="w = tf.exp(scores)",
        dtype="float32",
        kind="max_input",
        value=value,
        limit=limit,
    )


def by_name(series):
    return {one.name: one for one in series}


def test_loss_and_global_gradient_norm_are_kept_per_step():
    collected = RunSeries()
    for step in range(5):
        collected.observe(StepRecord(step, loss=1.0 / (step + 1), grad_norm=2.0**step))
    series = by_name(collected.snapshot())
    assert list(series) == ["loss", "grad_norm/global"]
    assert series["loss"].steps == (0, 1, 2, 3, 4)
    assert series["loss"].values == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4, 1 / 5])
    assert series["grad_norm/global"].values == (1, 2, 4, 8, 16)
    assert series["grad_norm/global"].scale == "log"
    assert series["loss"].group != series["grad_norm/global"].group


def test_with_several_optimizers_each_objective_gets_its_loss_plot_beside_the_loss():
    collected = RunSeries()
    collected.observe(StepRecord(0, loss=-0.7, grad_norm=1.0, objective_losses=(1.4, -0.7)))
    # A critic stepping alone: only the first objective has a loss at this step.
    collected.observe(StepRecord(1, loss=1.2, grad_norm=1.0, objective_losses=(1.2, None)))
    series = by_name(collected.snapshot())
    assert list(series) == ["loss", "loss/objective1", "loss/objective2", "grad_norm/global"]
    assert series["loss/objective1"].values == (1.4, 1.2)
    assert series["loss/objective2"].steps == (0,)
    assert series["loss/objective2"].group == series["loss"].group


def test_a_long_run_stays_bounded_and_spans_the_whole_run():
    collected = RunSeries(points=64)
    last = 300_000 - 1
    for step in range(last + 1):
        collected.add(Series("loss", "loss", "Loss"), step, math.sin(step / 1000))
    (loss,) = collected.snapshot()
    assert 32 <= len(loss.steps) <= 65  # thinned to `points`, plus the latest point
    assert loss.steps[0] == 0 and loss.steps[-1] == last
    assert loss.values[-1] == pytest.approx(math.sin(last / 1000))
    assert list(loss.steps) == sorted(set(loss.steps))
    gaps = {b - a for a, b in zip(loss.steps[:-2], loss.steps[1:-1])}
    assert len(gaps) == 1  # evenly spaced apart from the latest point


def test_non_finite_values_are_left_out():
    collected = RunSeries()
    for step, value in enumerate([1.0, math.nan, math.inf, 2.0]):
        collected.observe(StepRecord(step, loss=value))
    (loss,) = collected.snapshot()
    assert loss.steps == (0, 3)
    assert loss.values == (1.0, 2.0)


def test_each_risky_op_gets_its_own_plot_with_its_limit_and_place():
    collected = RunSeries()
    for step in range(0, 50, 10):
        collected.observe(
            StepRecord(step, headroom=(exp_sample(10.0 + step), exp_sample(1.0, key="b/Exp")))
        )
    series = by_name(collected.snapshot())
    exp = series["headroom/mp/Exp"]
    assert exp.steps == (0, 10, 20, 30, 40)
    assert exp.values == (10, 20, 30, 40, 50)
    assert exp.limit == 88.72
    assert exp.about == "mp/Exp"
    assert "Exp" in exp.group and "`mp`" in exp.group and "train.py:42" in exp.group
    assert "largest input" in exp.unit and "float32" in exp.unit
    other = series["headroom/b/Exp"]
    assert other.values == (1, 1, 1, 1, 1)
    assert other.group != exp.group  # one plot per op


def test_a_series_limit_follows_its_latest_sample():
    collected = RunSeries()
    collected.observe(StepRecord(0, headroom=(exp_sample(3.0, limit=88.72),)))
    collected.observe(StepRecord(10, headroom=(exp_sample(3.0, limit=11.09),)))
    (exp,) = collected.snapshot()
    assert exp.limit == 11.09


def test_per_layer_statistics_join_the_plots_of_their_kind():
    collected = RunSeries()
    layers = (LayerRecord("dense", grad_norm=0.5, dead_fraction=0.25), LayerRecord("out"))
    collected.observe(StepRecord(0, grad_norm=1.0, layers=layers))
    series = by_name(collected.snapshot())
    assert set(series) == {"grad_norm/global", "grad_norm/dense", "dead_fraction/dense"}
    assert series["grad_norm/dense"].group == series["grad_norm/global"].group
    assert series["grad_norm/dense"].title == "dense"
    assert series["grad_norm/dense"].about == "dense"
    assert series["dead_fraction/dense"].values == (0.25,)


def test_every_layer_statistic_has_its_plot_in_the_records_order():
    fields = [f.name for f in dataclasses.fields(LayerRecord) if f.name != "layer"]
    assert list(LAYER_SERIES) == fields


def test_headroom_series_describes_an_op_without_a_layer_or_line():
    sample = HeadroomSample("Exp", "Exp", None, None, None, None, "float32", "max_input", 1, 88.72)
    description = headroom_series(sample)
    assert description.group == "Headroom: Exp"
    assert description.steps == ()


def test_series_and_collector_reject_bad_arguments():
    with pytest.raises(ValueError, match="`scale` must be one of .*Received: scale='cubic'"):
        Series("x", "x", "X", scale="cubic")
    with pytest.raises(ValueError, match="same length"):
        Series("x", "x", "X", steps=(1, 2), values=(1.0,))
    with pytest.raises(ValueError, match="`points` must be an int of at least 2"):
        RunSeries(points=1)


def test_series_are_ordered_as_plots_are_read_whatever_came_first():
    collected = RunSeries()
    layers = (LayerRecord("dense", grad_norm=0.5, weight_norm=3.0),)
    collected.observe(StepRecord(0, layers=layers))  # per-layer values may come first
    collected.observe(StepRecord(0, loss=1.0, grad_norm=1.0, headroom=(exp_sample(1.0),)))
    names = [one.name for one in collected.snapshot()]
    assert names == [
        "loss",
        "grad_norm/global",
        "grad_norm/dense",
        "headroom/mp/Exp",
        "weight_norm/dense",
    ]


def test_a_series_runs_forward():
    collected = RunSeries()
    for step, value in [(0, 1.0), (5, 2.0), (5, 9.0), (3, 9.0), (6, 3.0)]:
        collected.add(Series("x", "x", "X"), step, value)
    (one,) = collected.snapshot()
    assert one.steps == (0, 5, 6)
    assert one.values == (1.0, 2.0, 3.0)
