"""The session hands the detectors the steps' records in batches: the same warnings, in the same
order and words, published at most `FEED_EVERY` steps later, and before anything reads them."""

from __future__ import annotations

import math
import random

import pytest

from gradient_doctor.core.detectors.loss_spike import LossSpikeDetector
from gradient_doctor.core.evidence import TrainingSetup
from gradient_doctor.core.pipeline import Adapter, Session, StepReading
from gradient_doctor.core.pipeline.session import FEED_EVERY
from gradient_doctor.core.records import LayerRecord, StepRecord

SPIKE_AT = 503  # between two feeds


class _LossAdapter(Adapter):
    """The step's loss and gradient norm alone, as the cheap mode hands them over."""

    def localize(self, replay, step, history, setup):
        raise RuntimeError("nothing to replay")

    def training_setup(self) -> TrainingSetup:
        return TrainingSetup(learning_rate=0.01)

    def is_user_file(self, filename: str) -> bool:
        return False


def _readings(steps: int, fail_at: int | None = None) -> list[StepReading]:
    rng = random.Random(3)
    readings = []
    for step in range(steps):
        loss = 1.0 + 0.05 * rng.random() + (9.0 if step == SPIKE_AT else 0.0)
        failed = step == fail_at
        readings.append(
            StepReading(
                failed=failed,
                loss=None if failed else loss,
                grad_norm=None if failed else math.exp(rng.gauss(0.0, 0.2)),
                skipped=int(failed),
                updates=step + 1,
            )
        )
    return readings


def _session(events: list) -> Session:
    session = Session(_LossAdapter(), trial_steps=0, stop_on_problem=False)
    session.on_warning = lambda w: events.append(("warning", session.steps_watched - 1, w))
    session.on_finding = lambda f: events.append(("finding", session.steps_watched - 1, f))
    return session


def test_a_warning_is_the_one_each_step_would_give_published_within_a_batch():
    events: list = []
    session = _session(events)
    detector = LossSpikeDetector(setup=TrainingSetup(learning_rate=0.01))
    for step, reading in enumerate(_readings(600)):
        session.after_step(reading, None)
        detector.observe(StepRecord(step, reading.loss, reading.grad_norm))
        if step == SPIKE_AT:
            fed_each_step = detector.findings()
    ((kind, published, warning),) = events
    assert kind == "warning" and [warning] == fed_each_step
    assert warning.step == SPIKE_AT <= published < SPIKE_AT + FEED_EVERY


def test_reading_the_warnings_feeds_the_steps_not_fed_yet():
    events: list = []
    session = _session(events)
    for reading in _readings(SPIKE_AT + 1):
        session.after_step(reading, None)
    assert not events  # not fed yet
    (warning,) = session.warnings
    assert warning.step == SPIKE_AT and [e[2] for e in events] == [warning]
    (loss,) = [s for s in session.report().series if s.name == "loss"]
    assert loss.steps[-1] == SPIKE_AT  # the series too


def test_the_warnings_before_a_failure_come_before_its_finding():
    events: list = []
    session = _session(events)
    for reading in _readings(SPIKE_AT + 3, fail_at=SPIKE_AT + 2):
        session.after_step(reading, None)
    assert [(kind, step) for kind, step, _ in events] == [
        ("warning", SPIKE_AT + 2),
        ("finding", SPIKE_AT + 2),
    ]


def test_a_step_with_per_layer_statistics_is_fed_at_once():
    class LayersAdapter(_LossAdapter):
        def step_records(self, step, reading):
            record = StepRecord(step, reading.loss, reading.grad_norm)
            if step != SPIKE_AT:
                return (record,)
            layers = (LayerRecord("dense", grad_norm=1.0),)
            return (StepRecord(step, layers=layers), record)

    events: list = []
    session = Session(LayersAdapter(), trial_steps=0)
    session.on_warning = lambda w: events.append(session.steps_watched - 1)
    for reading in _readings(SPIKE_AT + 1):
        session.after_step(reading, None)
    assert events == [SPIKE_AT]


def test_a_warning_callback_that_raises_leaves_the_later_steps_to_the_next_feed():
    readings = _readings(SPIKE_AT + FEED_EVERY)
    quiet = Session(_LossAdapter(), trial_steps=0)
    for reading in readings:
        quiet.after_step(reading, None)
    session = Session(_LossAdapter(), trial_steps=0)
    session.on_warning = _raise_once([])
    for reading in readings[: SPIKE_AT + 4]:  # three steps after the spike, not fed yet
        session.after_step(reading, None)
    with pytest.raises(RuntimeError, match="the callback failed"):
        session.warnings  # noqa: B018 (feeds the steps, publishing the spike)
    for reading in readings[SPIKE_AT + 4 :]:
        session.after_step(reading, None)
    assert session.report() == quiet.report()  # no step's record lost


def _raise_once(raised: list):
    def publish(warning):
        if not raised:
            raised.append(warning)
            raise RuntimeError("the callback failed")

    return publish


def test_another_model_trained_next_is_judged_afresh_and_the_warnings_before_stay():
    # A teacher trained to a loss near 0.007, then its student from 5.4: "the loss jumped
    # to 5.371, 780 times the running median" was the student's start, not a spike.
    def losses(session, values, start):
        for offset, value in enumerate(values):
            session.after_step(StepReading(failed=False, loss=value, grad_norm=1.0), None)
            assert session.steps_watched == start + offset + 1

    rng = random.Random(5)
    teacher = [0.007 + 0.001 * rng.random() for _ in range(80)]
    student = [5.4 - 0.01 * step for step in range(40)]

    plain = Session(_LossAdapter())
    losses(plain, teacher + student, 0)
    assert "loss_spike" in [w.category for w in plain.warnings]

    fresh = Session(_LossAdapter())
    losses(fresh, teacher[:40] + [0.9] + teacher[41:], 0)  # a spike of the teacher's own
    fresh.new_training()
    losses(fresh, student, 80)
    spikes = [w for w in fresh.warnings if w.category == "loss_spike"]
    assert [w.step for w in spikes] == [40]  # the teacher's, kept; none for the student


def test_a_warning_of_what_a_problem_already_reported_is_left_out_of_the_report():
    from gradient_doctor.core.findings import Finding

    session = Session(_LossAdapter(), trial_steps=0)
    dead = Finding("dead_units", 0, None, None, "Every ReLU unit of `dense` is dead.")
    session.problems.append(dead)
    again = Finding("dead_units", 190, None, None, "More than 90% of `dense`'s units are dead.")
    spike = Finding("loss_spike", 40, None, None, "The loss jumped.")
    session._retired = [again, spike]  # raised and retired by the detectors before
    report = session.report()
    assert report.problems == (dead,)
    assert report.warnings == (spike,)


def test_keep_going_diagnoses_a_run_of_failing_steps_once_and_at_most_a_few(recwarn):
    from gradient_doctor.core.pipeline.session import KEEP_GOING_DIAGNOSES

    session = Session(_LossAdapter(), trial_steps=0, stop_on_problem=False)
    # Steps 10-19 fail one after another (one trouble that stays), then every other
    # step from 30 on (each after a finite one): a new failure each.
    failing = set(range(10, 20)) | set(range(30, 60, 2))
    for step in range(60):
        failed = step in failing
        reading = StepReading(
            failed=failed,
            loss=None if failed else 1.0,
            grad_norm=None if failed else 1.0,
            skipped=int(failed),
            updates=step + 1,
        )
        session.after_step(reading, None)
    assert [p.step for p in session.problems] == [10, 30, 32, 34, 36][:KEEP_GOING_DIAGNOSES]
    assert session.undiagnosed_failures == len(failing) - KEEP_GOING_DIAGNOSES
    said = [str(w.message) for w in recwarn if "under --keep-going" in str(w.message)]
    assert len(said) == 1
    # The report counts them: each one's update was skipped too.
    from gradient_doctor.render.json_report import report_to_dict
    from gradient_doctor.render.text import header_line

    report = session.report("train.py")
    assert report.failures_counted == len(failing) - KEEP_GOING_DIAGNOSES
    assert report_to_dict(report)["failures_counted"] == len(failing) - KEEP_GOING_DIAGNOSES
    assert "(and 20 more failing steps counted, not diagnosed, under --keep-going" in (
        header_line(report)
    )
