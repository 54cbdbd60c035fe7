"""A long synthetic run through the `Session`: the warnings it publishes, when, and its report.

The records are those the TensorFlow watcher's full mode hands over (each step's loss
and gradient norm; every ten steps the layers' gradient norms of each step since the
last read, then the other per-layer statistics and a risky op's headroom). The run
holds every kind of early warning at once: two loss-spike episodes, a layer of dead
units, a layer whose gradients vanish, an exp whose input creeps toward its overflow
threshold, and a layer whose gradients explode near the end. The expected values were
recorded from the session before its per-step path was made cheaper (incremental
medians, findings built only when they change, series descriptions made once), so the
test pins that the cheaper path decides exactly as the plain one did: which warnings,
at which step they are published, their words, the report's problems and its series.
"""

from __future__ import annotations

import hashlib
import math
import random

import pytest

from gradient_doctor.core.evidence import TrainingSetup
from gradient_doctor.core.pipeline import Adapter, Session, StepReading
from gradient_doctor.core.records import HeadroomSample, LayerRecord, StepRecord

EVERY = 10
LAYERS = ("dense", "dense_1", "dense_2", "dense_3")


class _RecordsAdapter(Adapter):
    """Hands the session the run's records; the run never fails."""

    def __init__(self, records: list[tuple[StepRecord, ...]]) -> None:
        self._records = records

    def localize(self, replay, step, history, setup):
        raise AssertionError("the run is finite")

    def training_setup(self) -> TrainingSetup:
        return TrainingSetup(learning_rate=0.01)

    def is_user_file(self, filename: str) -> bool:
        return False

    def step_records(self, step: int, reading: StepReading):
        return self._records[step]


def _run(steps: int, flat_loss: bool, seed: int):
    """Readings and records of a run with every early warning (see the module docstring)."""
    rng = random.Random(seed)
    readings, records = [], []
    for step in range(steps):
        level = 1.2 if flat_loss else 0.3 + 2.0 * math.exp(-step / 500)
        loss = level * math.exp(rng.gauss(0.0, 0.05))
        if step in (500, 1500, 1501, 1502):
            loss *= 8.0
        grad_norm = math.exp(rng.gauss(0.0, 0.2))
        reading = StepReading(failed=False, loss=loss, grad_norm=grad_norm, updates=step + 1)
        readings.append(reading)
        record = StepRecord(step, loss=loss, grad_norm=grad_norm)
        if step % EVERY:
            records.append((record,))
            continue
        earlier = [
            StepRecord(past, layers=tuple(_grad_norm(layer, past, rng) for layer in LAYERS))
            for past in range(max(step - EVERY + 1, 0), step + 1)
        ]
        layers = tuple(_statistics(layer, step, rng) for layer in LAYERS)
        exp_input = 30.0 + 0.018 * step + rng.gauss(0.0, 0.5)
        headroom = (
            HeadroomSample(
                "head/Exp",
                "Exp",
                "dense_3",
                "train.py",
                12,
                "e = exp(z)",
                "float32",
                "max_input",
                exp_input,
                88.72,
                reduction_axis=1,
            ),
        )
        records.append((*earlier, StepRecord(step, loss, grad_norm, layers, headroom)))
    return readings, records


def _grad_norm(layer: str, step: int, rng: random.Random) -> LayerRecord:
    norm = 0.5 * math.exp(rng.gauss(0.0, 0.3))
    if layer == "dense" and step >= 1000:
        norm = 1e-9 * math.exp(rng.gauss(0.0, 0.3))  # vanishing from step 1000
    if layer == "dense_3" and step >= 2850:
        norm *= 1.25 ** (step - 2850)  # exploding near the end
    return LayerRecord(layer, grad_norm=norm)


def _statistics(layer: str, step: int, rng: random.Random) -> LayerRecord:
    dead = None if layer == "dense_3" else 0.05 * rng.random()
    if layer == "dense_1" and step >= 800:
        dead = 0.95 + 0.04 * rng.random()  # dead units from step 800
    return LayerRecord(
        layer,
        weight_norm=3.0 + 1e-4 * step,
        update_ratio=1e-3 * math.exp(rng.gauss(0.0, 0.2)),
        activation_max_abs=4.0 + rng.random(),
        dead_fraction=dead,
    )


def _watch(flat_loss: bool):
    readings, records = _run(3000, flat_loss, seed=7)
    published = []
    session = Session(_RecordsAdapter(records), trial_steps=0)
    session.on_warning = lambda warning: published.append(
        (session.steps_watched - 1, warning.category)
    )
    for reading in readings:
        session.after_step(reading, None)
    return session, published


def _digest(series) -> str:
    """A short hash of every series' name, description and points (values to 12 digits)."""
    text = repr(
        [
            (
                s.name,
                s.title,
                s.group,
                s.unit,
                s.scale,
                s.limit,
                s.about,
                s.steps,
                tuple(f"{v:.12g}" for v in s.values),
            )
            for s in series
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


EXPECTED_PUBLISHED = {
    False: [
        (500, "loss_spike"),
        (990, "dead_units"),
        (1010, "vanishing_gradients"),
        (1670, "forward_overflow"),
        (2870, "exploding_gradients"),
    ],
    True: [
        (500, "loss_spike"),
        (990, "dead_units"),
        (1010, "vanishing_gradients"),
        (1670, "forward_overflow"),
        (2870, "exploding_gradients"),
    ],
}
EXPECTED_WARNINGS = {
    False: [
        (
            "loss_spike",
            500,
            None,
            None,
            None,
            (
                "The loss jumped to 3.141 at step 1501, 7.7 times the running median "
                "0.409 of the last 100 losses (spike threshold 0.6135); it stayed above"
                " the threshold for 3 steps, from step 1500 to step 1502. It is the "
                "largest of 2 spike episodes so far, the first at step 500."
            ),
            ("gradient_clipping", "lower_learning_rate"),
        ),
        (
            "dead_units",
            990,
            None,
            None,
            None,
            (
                "In 1 layer more than 90% of the ReLU units output 0 for every example,"
                " for 20 records in a row: `dense_1` (98% since step 800). A dead unit "
                "gets no gradient, so it never recovers."
            ),
            ("activation_change", "lower_learning_rate", "better_init"),
        ),
        (
            "vanishing_gradients",
            1010,
            None,
            None,
            None,
            (
                "Gradients vanish in layer `dense`: its gradient norm has a median of "
                "9.6e-10 over the last 20 records, 1.8e-09 times the median 0.53 of the"
                " other layers, so its weights barely move."
            ),
            ("better_init", "batch_normalization", "activation_change"),
        ),
        (
            "forward_overflow",
            1670,
            3292,
            "head/Exp",
            (83.3939408200735, 88.72),
            (
                "Exp in layer `dense_3` (train.py:12): largest input 83.39 and growing "
                "~1.7 per 100 steps; float32 overflow expected near step 3292."
            ),
            (
                "stable_softmax",
                "constrain_weights",
                "normalize_input",
                "clip_input_domain",
            ),
        ),
        (
            "exploding_gradients",
            2868,
            None,
            None,
            None,
            (
                "The gradient norm of layer `dense_3` is growing exponentially: from "
                "2.4e+10 at step 2961 to 2.2e+13 at step 2990 (x900, ~27% per step) "
                "(first seen growing at step 2868). Left alone, the updates grow with them "
                "until the weights overflow."
            ),
            (
                "lower_learning_rate",
                "gradient_clipping",
                "better_init",
                "batch_normalization",
            ),
        ),
    ],
    True: [
        (
            "loss_spike",
            500,
            None,
            None,
            None,
            (
                "The loss jumped to 9.551 at step 500, 7.9 times the running median "
                "1.202 of the last 100 losses (spike threshold 1.802). It is the "
                "largest of 2 spike episodes so far, the first at step 500."
            ),
            ("gradient_clipping", "lower_learning_rate"),
        ),
        (
            "dead_units",
            990,
            None,
            None,
            None,
            (
                "In 1 layer more than 90% of the ReLU units output 0 for every example,"
                " for 20 records in a row: `dense_1` (98% since step 800). A dead unit "
                "gets no gradient, so it never recovers."
            ),
            ("activation_change", "lower_learning_rate", "better_init"),
        ),
        (
            "vanishing_gradients",
            1010,
            None,
            None,
            None,
            (
                "Gradients vanish in layer `dense`: its gradient norm has a median of "
                "9.6e-10 over the last 20 records, 1.8e-09 times the median 0.53 of the"
                " other layers, so its weights barely move."
            ),
            ("better_init", "batch_normalization", "activation_change"),
        ),
        (
            "forward_overflow",
            1670,
            3292,
            "head/Exp",
            (83.3939408200735, 88.72),
            (
                "Exp in layer `dense_3` (train.py:12): largest input 83.39 and growing "
                "~1.7 per 100 steps; float32 overflow expected near step 3292."
            ),
            (
                "stable_softmax",
                "constrain_weights",
                "normalize_input",
                "clip_input_domain",
            ),
        ),
        (
            "exploding_gradients",
            2868,
            None,
            None,
            None,
            (
                "The gradient norm of layer `dense_3` is growing exponentially: from "
                "2.4e+10 at step 2961 to 2.2e+13 at step 2990 (x900, ~27% per step) "
                "(first seen growing at step 2868). Left alone, the updates grow with them "
                "until the weights overflow."
            ),
            (
                "lower_learning_rate",
                "gradient_clipping",
                "better_init",
                "batch_normalization",
            ),
        ),
    ],
}
EXPECTED_PROBLEMS = {
    False: [],
    True: [
        (
            "vanishing_gradients",
            1010,
            (
                "Gradients vanish in layer `dense`: its gradient norm has a median of "
                "9.6e-10 over the last 20 records, 1.8e-09 times the median 0.53 of the"
                " other layers, so its weights barely move. This held from step 1010 to"
                " the end of the run (step 2999), and the loss did not improve: about "
                "1.2 over the last steps, against 1.2 when the run started. Training "
                "went on without learning; nothing was non-finite, so no step failed."
            ),
        ),
        (
            "dead_units",
            800,
            (
                "In 1 layer more than 90% of the ReLU units output 0 for every example,"
                " for 20 records in a row: `dense_1` (98% since step 800). A dead unit "
                "gets no gradient, so it never recovers. This held from step 800 to the"
                " end of the run (step 2990), and the loss did not improve: about 1.2 "
                "over the last steps, against 1.2 when the run started. Training went "
                "on without learning; nothing was non-finite, so no step failed."
            ),
        ),
    ],
}
EXPECTED_SERIES = {
    False: "88f6e1ab695efcf3",
    True: "c623cdd57c507b71",
}


@pytest.mark.parametrize("flat_loss", [False, True], ids=["falling loss", "flat loss"])
def test_a_long_run_publishes_the_same_warnings_and_report(flat_loss):
    session, published = _watch(flat_loss)
    report = session.report("train.py")
    warnings = [
        (
            w.category,
            w.step,
            w.forecast_step,
            w.origin.op_name if w.origin else None,
            (w.headroom.value, w.headroom.limit) if w.headroom else None,
            w.explanation,
            tuple(fix.family for fix in w.fixes),
        )
        for w in session.warnings
    ]
    problems = [(p.category, p.step, p.explanation) for p in report.problems]
    assert published == EXPECTED_PUBLISHED[flat_loss]
    assert warnings == EXPECTED_WARNINGS[flat_loss]
    assert problems == EXPECTED_PROBLEMS[flat_loss]
    assert _digest(report.series) == EXPECTED_SERIES[flat_loss]
    assert report.steps_watched == 3000
