"""The progress line: whole lines on stderr, at most one per interval, the closest limit named."""

import io

import pytest

from gradient_doctor.core.records import HeadroomSample, StepRecord
from gradient_doctor.render.progress import (
    ProgressLine,
    progress_text,
    used_fraction,
    worst_headroom,
)


def sample(key, kind, value, limit, op="Exp"):
    return HeadroomSample(key, op, "mp", "train.py", 42, "code", "float32", kind, value, limit)


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_used_fraction_measures_each_kind_against_its_limit():
    assert used_fraction(sample("a", "max_input", 44.36, 88.72)) == pytest.approx(0.5)
    assert used_fraction(sample("b", "abs_input", 0.99, 1.0, op="Acos")) == pytest.approx(0.99)
    assert used_fraction(sample("c", "max_input", 90.0, 88.72)) > 1
    assert used_fraction(sample("d", "min_input", 1e-30, 0.0, op="Log")) == 0
    assert used_fraction(sample("e", "min_input", -1e-3, 0.0, op="Log")) == 1


def test_the_worst_headroom_is_the_one_closest_to_its_own_limit():
    exp = sample("exp", "max_input", 80.0, 88.72)  # 90% of the way
    acos = sample("acos", "abs_input", 0.95, 1.0, op="Acos")  # 95%: closer, though smaller
    assert worst_headroom([exp, acos]) is acos
    assert worst_headroom([]) is None


def test_progress_text_names_step_loss_and_the_closest_limit():
    text = progress_text(1200, 0.0123, sample("mp/Exp", "max_input", 83.5, 88.72))
    assert text == (
        "gradient-doctor progress: step 1200, loss 0.0123, closest to a limit: Exp in layer "
        "`mp` (train.py:42), largest input 83.5 of 88.72 (94%)"
    )
    assert progress_text(3, None, None) == "gradient-doctor progress: step 3"


def test_at_most_one_whole_line_per_interval():
    clock, stream = FakeClock(), io.StringIO()
    progress = ProgressLine(30, stream=stream, clock=clock)
    for step in range(13):
        clock.now += 5  # a step every 5 s: lines 30 s and 60 s after the start
        headroom = (sample("mp/Exp", "max_input", 10.0 + step, 88.72),) if step % 2 == 0 else ()
        progress(StepRecord(step, loss=1.0 / (step + 1), headroom=headroom))
    lines = stream.getvalue().splitlines(keepends=True)
    assert len(lines) == 2
    assert all(line.endswith("\n") and "\r" not in line for line in lines)
    assert lines[0].startswith("gradient-doctor progress: step 5, loss 0.1667")
    assert "largest input 14 of 88.72" in lines[0]  # the latest sample, from step 4
    assert lines[1].startswith("gradient-doctor progress: step 11, loss 0.08333")
    assert "largest input 20 of 88.72" in lines[1]


def test_a_short_run_prints_nothing():
    clock, stream = FakeClock(), io.StringIO()
    progress = ProgressLine(30, stream=stream, clock=clock)
    for step in range(100):
        clock.now += 0.01
        progress(StepRecord(step, loss=1.0))
    assert stream.getvalue() == ""


@pytest.mark.parametrize("interval", [0, -1, "30", True])
def test_interval_must_be_positive_seconds(interval):
    with pytest.raises(ValueError, match="`interval` must be a number of seconds above 0"):
        ProgressLine(interval)
