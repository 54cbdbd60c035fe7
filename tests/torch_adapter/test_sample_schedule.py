"""The sampled steps' period: one in ten during the warm-up, then fitted to the time budget."""

from __future__ import annotations

import pytest

from gradient_doctor.torch_adapter.step.sample_schedule import SampleSchedule


class _Clock:
    """A clock the test moves: each step takes `plain` seconds, a sampled one `sampled`."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(schedule: SampleSchedule, clock: _Clock, steps: range, plain: float, sampled: float):
    """Drive `steps` through the schedule; the steps it sampled."""
    taken = []
    for step in steps:
        clock.now += sampled if schedule.samples(step) else plain
        if schedule.samples(step):
            taken.append(step)
        schedule.step_ended(step)
    return taken


def test_warmup_samples_one_step_in_ten_whatever_it_costs():
    clock = _Clock()
    schedule = SampleSchedule(warmup=200, clock=clock)
    taken = _run(schedule, clock, range(1, 200), plain=0.002, sampled=0.010)
    assert taken == list(range(10, 200, 10))
    assert schedule.period == 10


@pytest.mark.parametrize(
    ("plain", "sampled", "period"),
    [
        (0.015, 0.0165, 10),  # 1.5 ms extra over 15 ms: 1% at one in ten
        (0.0025, 0.004, 40),  # 1.5 ms over 2.5 ms: 6% at ten, 1.5% at forty
        (0.001, 0.004, 160),  # 3 ms over 1 ms: 1.9% at 160, the MLP benchmark's case
        (0.0002, 0.0015, 320),  # a toy model: over budget even at 320, the longest
    ],
)
def test_after_the_warmup_the_period_keeps_the_extra_time_within_the_budget(plain, sampled, period):
    clock = _Clock()
    schedule = SampleSchedule(warmup=200, budget=0.02, clock=clock)
    _run(schedule, clock, range(1, 400), plain, sampled)
    assert schedule.period == period
    taken = _run(schedule, clock, range(400, 800), plain, sampled)
    assert taken == [step for step in range(400, 800) if step % period == 0]


def test_the_period_comes_back_down_when_steps_get_longer():
    clock = _Clock()
    schedule = SampleSchedule(warmup=200, budget=0.02, clock=clock)
    _run(schedule, clock, range(1, 400), plain=0.0025, sampled=0.004)
    assert schedule.period == 40
    _run(schedule, clock, range(400, 1200), plain=0.030, sampled=0.0315)
    assert schedule.period == 10


def test_an_interrupted_step_is_not_timed():
    clock = _Clock()
    schedule = SampleSchedule(warmup=0, clock=clock)
    _run(schedule, clock, range(1, 30), plain=0.015, sampled=0.0165)
    schedule.interrupted()
    clock.now += 100.0  # an evaluation, or a failed step, between two steps
    schedule.step_ended(30)
    _run(schedule, clock, range(31, 60), plain=0.015, sampled=0.0165)
    assert schedule.period == 10
