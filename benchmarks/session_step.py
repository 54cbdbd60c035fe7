"""The doctor's per-step Python cost on the host: the session, the detectors, the series.

What runs after every training step in both adapters, outside the framework: the
`Session` takes the step's `StepReading`, keeps its history, feeds the step's records
to the early-warning detectors and the run's series, and checks for new warnings.
This benchmark drives a `Session` through an adapter of its own (no framework) for
many healthy steps with realistic readings, so it measures only that Python work: the
work per step is the same in every round (and its profile the same on any machine),
and a round of thousands of steps averages out the scheduler's noise. A busy machine
still slows whole runs alike, so compare code before and after a change by runs made
one right after the other (`--before`).

Setups:

- ``loss + grad norm``: each step's loss and global gradient norm, as the PyTorch
  adapter and the TensorFlow cheap mode (`layer_stats=False`) hand them over;
- ``full monitoring``: as the TensorFlow watcher's full mode does: every
  `HEADROOM_EVERY` steps, the per-layer gradient norms of each step since the last
  read, then one record with every layer's statistics and the risky ops' headroom;
- ``full, warnings standing``: the same run, where a loss spike and a layer of dead
  units raised early warnings in the first steps (their findings then stand for the
  rest of the run);
- ``full monitoring, 16 layers``: the full records of a deeper model;
- ``TF Watcher.after_step`` (with `--tf`): the TensorFlow watcher's own per-step path
  (the guard's statistics as Keras fetched them, read into a `StepReading`, the
  session, the layer statistics and headroom read back from the step's variables;
  the snapshot ring off, as `snapshot_ring.py` measures it) for a real tiny Keras
  model in full monitoring, called directly after a `fit` traced the step.

A round is one fresh session (or watcher's session) run for `--steps` steps; us/step
is the median over the rounds of the round's time over its steps, with the fastest
and slowest round beside it. One more round under `cProfile` lists the top costs
(own time, per step; the profiler inflates each call by a similar amount, so read
them as shares).

Usage:
    .venv/bin/python benchmarks/session_step.py [--rounds N] [--steps N] [--tf]
        [--output docs/performance.md]
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import math
import os
import platform
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from page_sections import write_section  # noqa: E402

import gradient_doctor  # noqa: E402
from gradient_doctor.core.evidence import TrainingSetup  # noqa: E402
from gradient_doctor.core.pipeline import Adapter, Session, StepReading  # noqa: E402
from gradient_doctor.core.records import HeadroomSample, LayerRecord, StepRecord  # noqa: E402

SECTION = "## The session's Python work per step (`benchmarks/session_step.py`)"
SEED = 1234
# As the TensorFlow watcher reads per-layer statistics and headroom.
EVERY = 10
# A four-layer ReLU MLP with a softmax head of the user's (one risky exp).
LAYERS = ("dense", "dense_1", "dense_2", "dense_3")
# A deeper model's layers: what grows with the number of layers.
DEEP_LAYERS = 16
PROFILE_TOP = 10
# The setups whose profile the page shows (by row): the cheap and full records, the TF row.
PAGE_PROFILES = (0, 1, 4)


@dataclass(frozen=True)
class Run:
    """A synthetic run: each step's reading and the records its adapter hands over.

    Attributes:
        name: the row's name.
        readings: one `StepReading` per step.
        records: per step, the records `step_records` returns (None: the adapter's
            default, the step's loss and gradient norm).
    """

    name: str
    readings: tuple[StepReading, ...]
    records: tuple[tuple[StepRecord, ...], ...] | None


class BenchAdapter(Adapter):
    """An adapter without a framework: it hands over the run's precomputed records."""

    def __init__(self, run: Run) -> None:
        self._records = run.records

    def localize(self, replay, step, history, setup):
        raise AssertionError("the benchmark's runs are healthy")

    def training_setup(self) -> TrainingSetup:
        return TrainingSetup(learning_rate=1e-3)

    def is_user_file(self, filename: str) -> bool:
        return False

    def step_records(self, step: int, reading: StepReading) -> Sequence[StepRecord]:
        if self._records is None:
            return super().step_records(step, reading)
        return self._records[step]


def healthy_readings(steps: int, rng: random.Random, spike_at: int | None) -> list[StepReading]:
    """A falling, noisy loss and a noisy gradient norm; one loss spike at `spike_at`."""
    readings = []
    for step in range(steps):
        loss = 2.3 * math.exp(-step / 4000) + 0.1 + 0.05 * rng.random()
        if step == spike_at:
            loss *= 20
        grad_norm = math.exp(rng.gauss(0.0, 0.3))
        readings.append(StepReading(failed=False, loss=loss, grad_norm=grad_norm, updates=step + 1))
    return readings


def full_records(
    readings: Sequence[StepReading],
    rng: random.Random,
    dead_layer: str | None,
    names: Sequence[str] = LAYERS,
) -> list[tuple[StepRecord, ...]]:
    """The records of the TensorFlow watcher's full mode for each step.

    Every `EVERY` steps: one record per step since the last read with each layer's
    gradient norm, then the step's record with the other per-layer statistics and
    the headroom of one `Exp`; in between, the step's loss and gradient norm alone.
    """
    result = []
    for step, reading in enumerate(readings):
        record = StepRecord(step, loss=reading.loss, grad_norm=reading.grad_norm)
        if step % EVERY:
            result.append((record,))
            continue
        first = max(step - EVERY + 1, 0)
        earlier = [
            StepRecord(
                past,
                layers=tuple(
                    LayerRecord(layer, grad_norm=math.exp(rng.gauss(-1.0 - i, 0.3)))
                    for i, layer in enumerate(names)
                ),
            )
            for past in range(first, step + 1)
        ]
        layers = tuple(
            LayerRecord(
                layer,
                weight_norm=10.0 + step * 1e-3 + i,
                update_ratio=1e-3 * math.exp(rng.gauss(0.0, 0.2)),
                activation_max_abs=5.0 + rng.random(),
                dead_fraction=(
                    None
                    if i == len(names) - 1
                    else 0.97
                    if layer == dead_layer
                    else 0.1 * rng.random()
                ),
            )
            for i, layer in enumerate(names)
        )
        headroom = (
            HeadroomSample(
                key="softmax/Exp",
                op="Exp",
                layer="dense_3",
                file="train.py",
                line=42,
                code="e = tf.exp(logits)",
                dtype="float32",
                kind="max_input",
                value=20.0 + 2.0 * rng.random(),
                limit=88.72,
            ),
        )
        result.append(
            (*earlier, StepRecord(step, reading.loss, reading.grad_norm, layers, headroom))
        )
    return result


def make_runs(steps: int) -> list[Run]:
    """The benchmark's four synthetic runs, each seeded."""
    rng = random.Random(SEED)
    cheap = healthy_readings(steps, rng, None)
    full = healthy_readings(steps, rng, None)
    warned = healthy_readings(steps, rng, spike_at=200)
    deep = healthy_readings(steps, rng, None)
    many = tuple(f"dense_{i}" for i in range(DEEP_LAYERS))
    return [
        Run("loss + grad norm (PyTorch; TF cheap mode)", tuple(cheap), None),
        Run(
            f"full monitoring ({len(LAYERS)} layers, 1 risky op, per-layer every {EVERY} steps)",
            tuple(full),
            tuple(full_records(full, rng, None)),
        ),
        Run(
            "full, a loss-spike and a dead-units warning standing",
            tuple(warned),
            tuple(full_records(warned, rng, "dense_1")),
        ),
        Run(
            f"full monitoring, {DEEP_LAYERS} layers",
            tuple(deep),
            tuple(full_records(deep, rng, None, many)),
        ),
    ]


def session_round(run: Run) -> Callable[[], int]:
    """A fresh session for `run`: a function that drives it through every step."""

    def drive() -> int:
        session = Session(BenchAdapter(run), trial_steps=0)
        after_step = session.after_step
        for reading in run.readings:
            after_step(reading, None)
        return len(run.readings)

    return drive


@dataclass(frozen=True)
class Timing:
    """One setup's rounds: wall and CPU microseconds per step, and the profile's top."""

    name: str
    wall: tuple[float, ...]
    cpu: tuple[float, ...]
    top: tuple[tuple[str, float, float], ...]  # (function, own us per step, calls per step)


def timed(name: str, make_round: Callable[[], Callable[[], int]], rounds: int) -> Timing:
    """Time `rounds` fresh rounds, then profile one more."""
    wall, cpu = [], []
    for _ in range(rounds):
        drive = make_round()
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        steps = drive()
        wall.append(1e6 * (time.perf_counter() - start_wall) / steps)
        cpu.append(1e6 * (time.process_time() - start_cpu) / steps)
    drive = make_round()
    profile = cProfile.Profile()
    steps = profile.runcall(drive)
    return Timing(name, tuple(wall), tuple(cpu), top_costs(profile, steps))


def top_costs(profile: cProfile.Profile, steps: int) -> tuple[tuple[str, float, float], ...]:
    """The functions with the most own time, per step."""
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, function), (_, calls, own, _, _) in stats.stats.items():
        where = _short(filename)
        label = f"{where}:{line}({function})" if line else function
        rows.append((label, 1e6 * own / steps, calls / steps))
    rows.sort(key=lambda row: -row[1])
    return tuple(rows[:PROFILE_TOP])


def _short(filename: str) -> str:
    """A file's path from the package (or the standard library's module name)."""
    marker = f"gradient_doctor{os.sep}"
    if marker in filename:
        return filename[filename.rindex(marker) + len(marker) :]
    return os.path.basename(filename)


def tf_round_maker(steps: int) -> Callable[[], Callable[[], int]]:
    """Rounds of the TensorFlow watcher's `after_step` after a `fit` traced its step."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np

    from gradient_doctor.tf_adapter.hooks.model_hooks import attach
    from gradient_doctor.tf_adapter.trials.snapshots import SnapshotRing
    from gradient_doctor.tf_adapter.watcher import Watcher

    keras.utils.set_random_seed(SEED)
    data = np.random.default_rng(SEED)
    x = data.normal(size=(256, 32)).astype("float32")
    y = data.integers(0, 10, size=(256,))

    watchers: list[Watcher] = []

    def make_round() -> Callable[[], int]:
        while watchers:  # the last round's patches and tape hook go
            watchers.pop().uninstall()
        model = keras.Sequential(
            [
                keras.Input((32,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
        watcher = Watcher(trial_steps=0)
        # The ring's copies (a background thread every 50 steps) have their own section.
        watcher.snapshots = SnapshotRing(every=10**9)
        watchers.append(watcher)
        attach(model, watcher)
        callback = gradient_doctor.Doctor(verbose=False, watcher=watcher)
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[callback])
        fetched = watcher.guard.stats_tensor().numpy()
        if watcher.guard.read(fetched).tripped:
            raise AssertionError("the traced fit was not finite")

        def no_replay():
            raise AssertionError("the benchmark's steps are healthy")

        def drive() -> int:
            after_step = watcher.after_step
            for _ in range(steps):
                after_step(no_replay, no_replay, fetched)
            return steps

        return drive

    return make_round


def spread(values: Sequence[float]) -> str:
    """ "12.3 (11.9-13.0)": the median and the fastest and slowest rounds."""
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def table(timings: Sequence[Timing], baseline: dict[str, float] | None) -> str:
    """The Markdown table of us/step per setup (with a `before` column when given)."""
    head = "| setup | us/step (fastest-slowest round) | CPU us/step |"
    rule = "|---|---:|---:|"
    if baseline:
        head += " before, CPU us/step | after / before (CPU) |"
        rule += "---:|---:|"
    lines = [head, rule]
    for timing in timings:
        row = f"| {timing.name} | {spread(timing.wall)} | {spread(timing.cpu)} |"
        if baseline:
            before = baseline.get(timing.name)
            ratio = statistics.median(timing.cpu) / before if before else None
            row += f" {before:.1f} | {ratio:.2f}x |" if before else " | |"
        lines.append(row)
    return "\n".join(lines)


def profile_table(timing: Timing) -> str:
    """The profile's top functions of one setup, as Markdown."""
    lines = [
        f"**{timing.name}**, top {len(timing.top)} by own time (under cProfile)",
        "",
        "| function | own us/step | calls/step |",
        "|---|---:|---:|",
    ]
    lines += [f"| `{label}` | {own:.2f} | {calls:.2f} |" for label, own, calls in timing.top]
    return "\n".join(lines)


def environment_lines() -> list[str]:
    """Date, versions and CPU, as Markdown list items."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"- Date: {now}",
        f"- Python {platform.python_version()}, gradient_doctor {gradient_doctor.__version__}",
        f"- CPU: {platform.machine()}, {os.cpu_count()} logical cores, {platform.platform()}",
    ]


def parse_baseline(items: Sequence[str]) -> dict[str, float]:
    """`--before "setup=us"` pairs (the same benchmark run on the code before a change)."""
    baseline = {}
    for item in items:
        name, _, value = item.rpartition("=")
        baseline[name] = float(value)
    return baseline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--tf", action="store_true", help="also time the TensorFlow watcher")
    parser.add_argument("--tf-steps", type=int, default=4_000)
    parser.add_argument("--tf-rounds", type=int, default=7)
    parser.add_argument(
        "--before",
        action="append",
        default=[],
        help='"setup=CPU us/step" of the code before a change (as this prints them), for '
        "the before/after column",
    )
    parser.add_argument("--output", help="rewrite this benchmark's section of this page")
    parser.add_argument("--profile", action="store_true", help="print every setup's profile")
    options = parser.parse_args()
    began = time.perf_counter()
    timings = [
        timed(run.name, lambda run=run: session_round(run), options.rounds)
        for run in make_runs(options.steps)
    ]
    if options.tf:
        name = "TF `Watcher.after_step`, tiny Keras MLP (32-3x64-10), full monitoring"
        timings.append(timed(name, tf_round_maker(options.tf_steps), options.tf_rounds))
    baseline = parse_baseline(options.before)
    text = table(timings, baseline)
    print(text)
    for timing in timings:
        print(f"{timing.name}={statistics.median(timing.cpu):.2f}")  # for --before
    profiles = [profile_table(timing) for timing in timings]
    if options.profile:
        print("\n\n".join(profiles))
    if options.output:
        # The page shows the cheap and full records' profiles and the TF watcher's.
        shown = [profiles[index] for index in PAGE_PROFILES if index < len(profiles)]
        write_section(options.output, SECTION, page(options, timings, text, shown, began))


def page(options, timings: Sequence[Timing], text: str, profiles: list[str], began: float) -> str:
    """This benchmark's section of the performance page."""
    lines = [
        SECTION,
        "",
        "Generated by `benchmarks/session_step.py --output docs/performance.md` (which "
        "rewrites this section only).",
        "",
        *environment_lines(),
        f"- Benchmark run time: {time.perf_counter() - began:.0f} s",
        "",
        "What the doctor runs in Python after every training step, outside the framework: "
        "the `Session` takes the step's reading, keeps its history, feeds the step's records "
        "to the detectors and the run's series, and looks for new warnings. A `Session` is "
        "driven through an adapter of the benchmark's own (no framework) for "
        f"{options.steps} healthy steps per round, {options.rounds} rounds, each a fresh "
        "session; the readings and records are made before the clock starts, so only the "
        "session's work is timed. The work per step is the same in every round and its "
        "profile the same on any machine, but on this shared 2-core machine whole runs "
        "ran up to 2x slower when other engineers' tests ran beside them: compare runs "
        "made one right after the other. `loss + grad norm` is what the PyTorch adapter and the "
        "TensorFlow cheap mode hand over; `full monitoring` adds, every "
        f"{EVERY} steps, the per-layer gradient norms of each step since the last read and "
        "one record with the other per-layer statistics and one risky op's headroom, as the "
        "TensorFlow watcher does; the third run has a loss spike and a layer of dead units "
        "early, so two warnings stand for the rest of it; the fourth has "
        f"{DEEP_LAYERS} layers."
        + (
            f" The TF row calls the watcher's `after_step` ({options.tf_steps} steps a round, "
            f"{options.tf_rounds} rounds) on a tiny Keras model after a `fit` traced its "
            "step, with the statistics Keras fetched: the guard's reading, the session, the "
            "layer statistics and headroom read back from the step's variables every "
            f"{EVERY} steps; the snapshot ring is off here (its copies, on a background "
            "thread every 50 steps, are measured in their own section)."
            if options.tf
            else ""
        ),
        "",
        text,
        "",
        *(
            [
                "`before` is the same benchmark run just before on the code before the per-step "
                "path was made cheaper (git 0f0fbfe), compared in CPU time (a busy machine "
                "delays the wall clock more); read the ratio, not the last digit.",
                "",
            ]
            if options.before
            else []
        ),
        "What keeps it cheap, every decision unchanged (`tests/core/test_session_long_run.py` "
        "pins a 3000-step run's published warnings, their words, the report's problems and "
        "series): the loss spike's running median and median absolute deviation come from a "
        "window kept sorted (`core/detectors/sorted_window.py`: one insertion a step, the "
        "deviations' middle order statistics by a binary search; not two sorts of 100), and "
        "the deviation only for a loss above the median plus its relative floor, under which "
        "no spread makes a spike; each detector builds its findings once per change and counts "
        "the changes (`CountedFindings.revision`), so the session looks for new warnings only "
        "when a count moved (it built and sorted every finding after every step); vanishing "
        "gradients judge their windows again only at a record with new norms, from sorted "
        "windows, with the other layers' median from one sorted list (a sort per layer "
        "before: quadratic in the layers); exploding gradients keep each window's range as "
        "norms arrive; a record's finite per-layer values are gathered once for all their "
        "readers; the run's series add a point to a series they already hold without making "
        "its description again (a headroom series' description names its op and line).",
        "",
        "In the TF row, what is left beside the session is TensorFlow's: every "
        f"{EVERY} steps the layer statistics and headroom are read back with about nine "
        "eager variable reads (`LayerStats.read`, `read_grad_norms`, the update norms, "
        "`Guard.read_headroom`).",
        "",
        "The top costs, one more round of three setups under cProfile (own time per step; the "
        "profiler slows every call, so read them as shares of the total):",
        "",
        "\n\n".join(profiles),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
