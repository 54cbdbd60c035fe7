"""What the ring of earlier good states (`tf_adapter/trials/snapshots.py`) costs per step.

Fix trials of slow-building failures start from a state saved before the trouble:
every `every` steps (default 50) the doctor copies the optimizers' variables and the
weights they train to host memory. This measures that copy on the benchmark models,
two ways, in one process:

- the copy itself: the wall time one `SnapshotRing` copy of the model's state takes
  on the training thread (the reads), divided by `every` and by the median step time
  of a watched `fit` (the share of each step it costs, amortised), and the time with
  the background copy to host memory included;
- A/B: a watched `fit` with the ring at its default against the same watched `fit`
  with the ring off (`every` so large it never copies), in alternating rounds; the
  median and interquartile range of the per-round ratios of median step times.

The A/B ratio is within the machine's noise at this size; the copy's share is the
figure to hold against the 2% budget.

Usage:
    .venv/bin/python benchmarks/snapshot_ring.py [--rounds N] [--output docs/performance.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import environment_lines  # noqa: E402
from page_sections import write_section  # noqa: E402

import gradient_doctor  # noqa: E402
from gradient_doctor.tf_adapter.trials.snapshots import (  # noqa: E402
    DEFAULT_EVERY,
    SnapshotRing,
    optimizer_state,
)
from gradient_doctor.tf_adapter.watcher import Watcher  # noqa: E402

BUDGET = 0.02  # the ring may cost at most 2% of step time
SECTION = "## Snapshot ring (`benchmarks/snapshot_ring.py`)"


def mlp() -> keras.Model:
    return keras.Sequential(
        [keras.Input((784,))]
        + [keras.layers.Dense(512, activation="relu") for _ in range(3)]
        + [keras.layers.Dense(10)]
    )


def cnn() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )


MODELS = {
    "MLP 784-3x512-10, Adam, batch 128": (mlp, (784,), 128),
    "CNN, Adam, batch 64": (cnn, (28, 28, 1), 64),
}


class StepTimes(keras.callbacks.Callback):
    """Wall time of each step of a fit (after the first few, which trace)."""

    def __init__(self, skip: int = 3) -> None:
        super().__init__()
        self.skip, self.times, self._start = skip, [], 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if batch >= self.skip:
            self.times.append(time.perf_counter() - self._start)


def watched(build, shape, batch, every: int):
    keras.utils.set_random_seed(1)
    model = build()
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    watcher = Watcher(trial_steps=0)  # kept across fits: the step is traced once
    watcher.snapshots = SnapshotRing(every=every)
    doctor = gradient_doctor.Doctor(watcher=watcher)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(batch * 40, *shape)).astype("float32")
    y = rng.integers(0, 10, size=(batch * 40,))
    return model, doctor, x, y


def fit_median(model, doctor, x, y, batch) -> float:
    times = StepTimes()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=[doctor, times])
    return statistics.median(times.times)


def copy_seconds(doctor, repeats: int = 20) -> tuple[float, float]:
    """Median wall times of one copy of the state the ring keeps: on the training
    thread (the reads), and in all (the background copy to host memory included)."""
    ring = SnapshotRing(every=1)
    variables = optimizer_state(doctor.watcher._optimizers)
    on_thread, in_all = [], []
    for step in range(repeats):
        start = time.perf_counter()
        ring.after_finite_step(step, lambda: variables)
        on_thread.append(time.perf_counter() - start)
        assert ring.saved()[-1].values  # waits for the background copy
        in_all.append(time.perf_counter() - start)
    return statistics.median(on_thread[1:]), statistics.median(in_all[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument(
        "--output", help="also write this section into the Markdown page (docs/performance.md)"
    )
    options = parser.parse_args()
    rows = []
    for name, (build, shape, batch) in MODELS.items():
        on = watched(build, shape, batch, DEFAULT_EVERY)
        off = watched(build, shape, batch, 10**9)
        ratios, steps = [], []
        for round_ in range(options.rounds):
            order = (on, off) if round_ % 2 == 0 else (off, on)
            medians = {id(arm): fit_median(*arm, batch) for arm in order}
            ratios.append(medians[id(on)] / medians[id(off)])
            steps.append(medians[id(off)])
        copy, whole = copy_seconds(on[1])
        step = statistics.median(steps)
        share = copy / DEFAULT_EVERY / step
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        size = sum(np.asarray(v).nbytes for v in optimizer_state(on[1].watcher._optimizers))
        rows.append(
            f"| {name} | {step * 1e3:.2f} | {size / 2**20:.1f} MB | {copy * 1e3:.2f} | "
            f"{whole * 1e3:.2f} | "
            f"{share:.2%} | {statistics.median(ratios):.3f}x ({q1:.3f}-{q3:.3f}) | "
            f"{'yes' if share <= BUDGET else 'no'} |"
        )
        print(rows[-1], flush=True)
    table = "\n".join(
        [
            SECTION,
            "",
            "Target: the snapshot ring (earlier good states for fix trials) costs at most 2% "
            "of step time at the default interval. Generated by `benchmarks/snapshot_ring.py "
            "--output docs/performance.md` (which rewrites this section only).",
            "",
            *environment_lines(),
            "",
            f"Copy every {DEFAULT_EVERY} steps; {options.rounds} alternating rounds of "
            "watched fits, the ring on and off (its interval past the run) on the same "
            "model; the share is the copy's time on the training thread over the interval "
            "and the ring-off step.",
            "",
            "| model | step ms (ring off) | state copied | one copy on the training thread, ms "
            "| one copy with the background copy to host, ms | training thread's share of a "
            "step (amortised) | A/B ratio, ring on / off (IQR) | within 2% |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
            *rows,
        ]
    )
    print(table)
    if options.output:
        write_section(options.output, SECTION, table + "\n")


if __name__ == "__main__":
    main()
