"""What each piece of the watched step costs on `model.fit`, as a ladder of setups.

The guard's `apply` is a few named steps, and the model hook adds a step counter;
each piece is switched off in this benchmark by replacing its step on the watcher's
own objects (never in the package), so a setup runs exactly the pieces listed:

- ``plain``: `model.fit` as is;
- ``read-back``: the train-step wrapper, the read-back of the statistics vector with
  Keras's logs, and the doctor's Python work after each step (reading it, the
  detectors, the snapshots), with nothing of the guard's in the step;
- ``+ check``: the guard's fused sum of squares, the finite test and the `cond` around
  the update;
- ``+ stash``: the skip branch that keeps the failing batch and random draws;
- ``+ norms``: the statistics vector written every step (gradient norm, loss, latch,
  counts of skipped and asked-for updates);
- ``+ zero streaks``: the per-variable counts of exactly-zero gradients;
- ``+ counter``: the step counter of the model hook (which step of a multi-step call
  tripped); this is the cheap mode, `Doctor(layer_stats=False)`;
- ``+ layer ring``: per-layer statistics: each layer's gradient norm into a ring every
  step, weight and update norms and activations one step in ten;
- ``+ headroom``: one reduction per risky op of the user's; this is full monitoring,
  the default.

After a one-step `fit` that traces each setup's step, the steps are driven as `fit`
drives them (the train function between the doctor's batch callbacks), one step of
every setup in turn, in an order that rotates and reverses from step to step, so
that the slow spells of a machine shared with other jobs fall on all setups alike.
A round is a block of such steps; a setup's ratio is the median of its per-round
ratios of median step times to plain's, with their interquartile range; a piece's
cost is the median (and IQR) of the per-round differences between its setup's
ratio and the setup before, in percent of plain's step time. The same is done with
the process's CPU time per step.

Usage:
    .venv/bin/python benchmarks/step_pieces.py [--rounds N] [--output docs/performance.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import (  # noqa: E402
    MLP_NAME,
    Contestant,
    ModelSpec,
    Samples,
    build_mlp,
    environment_lines,
    make_dataset,
    make_model,
    timed_fit,
)
from page_sections import write_section  # noqa: E402

import gradient_doctor  # noqa: E402
from gradient_doctor.tf_adapter.hooks.model_hooks import attach  # noqa: E402
from gradient_doctor.tf_adapter.watcher import Watcher  # noqa: E402

SECTION = "## What each piece costs (`benchmarks/step_pieces.py`)"


@dataclass(frozen=True)
class Rung:
    """One setup of the ladder: the pieces it runs (cumulative), and the one it adds."""

    name: str
    pieces: frozenset[str]


_LADDER = (
    "read-back",
    "check",
    "stash",
    "norms",
    "zero streaks",
    "counter",
    "layer ring",
    "headroom",
)
RUNGS = (
    Rung("plain", frozenset()),
    *(
        Rung(piece if i == 0 else f"+ {piece}", frozenset(_LADDER[: i + 1]))
        for i, piece in enumerate(_LADDER)
    ),
)


class UserSoftmax(keras.layers.Layer):
    """A softmax written by the user (a risky `exp` the doctor measures headroom on)."""

    def call(self, x):
        shifted = x - tf.reduce_max(x, axis=-1, keepdims=True)
        weights = tf.exp(shifted)
        return weights / tf.reduce_sum(weights, axis=-1, keepdims=True)


def build_mlp_user_softmax() -> keras.Model:
    """The MLP with the user's own softmax on its logits (probabilities out)."""
    inputs = keras.Input((784,))
    return keras.Model(inputs, UserSoftmax()(build_mlp()(inputs)), name="mlp_user_softmax")


MODELS = (
    ModelSpec(MLP_NAME, build_mlp, (784,), 128, timed_steps=0),
    ModelSpec(
        f"{MLP_NAME}, the user's own softmax (one risky exp)",
        build_mlp_user_softmax,
        (784,),
        128,
        timed_steps=0,  # unused: `--steps` per round
    ),
)
WARMUP_STEPS = 3


class _NoCounter:
    """Stands in for the model hook's step counter when the counter is switched off."""

    def read_value(self) -> tf.Tensor:
        return tf.constant(0, tf.int64)

    def assign_add(self, delta) -> None:
        return None


def _unchecked_apply(guard):
    """The guard's `apply` with nothing added to the step: its Python part only."""

    def apply(original_apply, optimizer, grads, trainable_variables=None):
        update, result = guard._prepare(original_apply, optimizer, grads, trainable_variables)
        return result if update is None else update.apply()

    return apply


def _no_skip_branch(update, latch_open):
    return lambda: tf.constant(False)


def watched_contestant(spec: ModelSpec, rung: Rung) -> Contestant:
    """A compiled model watched with exactly the pieces of `rung` (plain: not watched)."""
    model = make_model(spec)
    if rung.name == "plain":
        return Contestant(model, [])
    if spec.vocabulary:  # only the float models here
        raise ValueError(f"no integer-input models in the ladder. Received: {spec.name}")
    watcher = Watcher(layer_stats="layer ring" in rung.pieces)
    hook = attach(model, watcher)  # the callback finds it and keeps it
    guard = watcher.guard
    if "check" not in rung.pieces:
        guard.apply = _unchecked_apply(guard)
    if "stash" not in rung.pieces:
        guard._skip_branch = _no_skip_branch
    if "norms" not in rung.pieces:
        guard._record = lambda update, check, ok, failed_replica: None
    if "zero streaks" not in rung.pieces:
        guard.zero_streaks.update = lambda variables, squares: tf.constant(0.0)
    if "counter" not in rung.pieces:
        hook.steps_counter = _NoCounter()
    if "headroom" not in rung.pieces:
        guard._measure_headroom = lambda graph: None
    return Contestant(model, [gradient_doctor.Doctor(verbose=False, watcher=watcher)])


class Stepper:
    """One setup's model, driven one training step at a time as `fit` drives it.

    A one-step `fit` first builds the optimizer and traces the (watched) step;
    after that each step is one call of the train function between the doctor's
    `on_train_batch_begin` and `on_train_batch_end`, as in `fit` (Keras's own
    callbacks, the same for every setup, are left out).
    """

    def __init__(self, spec: ModelSpec, rung: Rung) -> None:
        contestant = watched_contestant(spec, rung)
        self.model, self.callbacks = contestant.model, contestant.callbacks
        dataset = make_dataset(spec)
        timed_fit(contestant, dataset, rung.name, WARMUP_STEPS, WARMUP_STEPS)
        for callback in self.callbacks:
            callback.on_train_begin()
        self.iterator = iter(dataset)
        self.steps = 0

    def step(self) -> tuple[float, float]:
        """Run one step; its wall time and the process's CPU time, in seconds."""
        started, started_cpu = time.perf_counter(), time.process_time()
        for callback in self.callbacks:
            callback.on_train_batch_begin(self.steps)
        logs = self.model.train_function(self.iterator)
        for callback in self.callbacks:
            callback.on_train_batch_end(self.steps, logs)
        self.steps += 1
        return time.perf_counter() - started, time.process_time() - started_cpu


def measure(
    rounds: int, steps: int, models: tuple[ModelSpec, ...] = MODELS
) -> list[tuple[dict[str, Samples], dict[str, Samples]]]:
    """Every rung of every model: `rounds` rounds of `steps` steps, interleaved step by step.

    Within a round each step runs one step of every setup, in an order that
    rotates and reverses from step to step, so that a slow spell of the machine
    (other jobs) falls on all setups alike.
    """
    started = time.perf_counter()
    names = [rung.name for rung in RUNGS]
    results = []
    for spec in models:
        steppers = {rung.name: Stepper(spec, rung) for rung in RUNGS}
        wall = {name: Samples() for name in names}
        cpu = {name: Samples() for name in names}
        for round_index in range(rounds):
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
            for step in range(steps):
                turn = round_index * steps + step
                order = names[turn % len(names) :] + names[: turn % len(names)]
                for name in order[::-1] if turn % 2 else order:
                    times[name].append(steppers[name].step())
            for name in names:
                wall[name].rounds.append([w for w, _ in times[name]])
                cpu[name].rounds.append([c for _, c in times[name]])
        results.append((wall, cpu))
        print(f"{spec.name}: done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return results


def _per_round_ratios(samples: dict[str, Samples], name: str) -> list[float]:
    return [
        statistics.median(s) / statistics.median(p)
        for s, p in zip(samples[name].rounds, samples["plain"].rounds, strict=True)
    ]


def _median_iqr(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return statistics.median(values), q1, q3


TABLE_HEADER = (
    "| setup (adds) | ms/step | ratio to plain (IQR) | the piece's cost, % of plain (IQR) "
    "| CPU ratio (IQR) | the piece's CPU cost, % (IQR) |\n"
    "|---|---:|---:|---:|---:|---:|"
)


def _ratio_cells(samples: dict[str, Samples], name: str, previous) -> tuple[list, str, str]:
    """This rung's per-round ratios, its ratio cell and its piece's cost cell."""
    ratios = _per_round_ratios(samples, name)
    if previous is None:
        return ratios, "1 (reference)", ""
    ratio = "{:.3f}x ({:.3f}-{:.3f})".format(*_median_iqr(ratios))
    steps = [100.0 * (a - b) for a, b in zip(ratios, previous, strict=True)]
    return ratios, ratio, "{:+.1f} ({:+.1f} to {:+.1f})".format(*_median_iqr(steps))


def table_lines(spec: ModelSpec, samples: tuple[dict[str, Samples], dict[str, Samples]]):
    """One model's ladder as a Markdown table (wall time, then the process's CPU time)."""
    wall, cpu = samples
    lines = [f"**{spec.name}**", "", TABLE_HEADER]
    previous = previous_cpu = None
    for rung in RUNGS:
        previous, ratio, cost = _ratio_cells(wall, rung.name, previous)
        previous_cpu, cpu_ratio, cpu_cost = _ratio_cells(cpu, rung.name, previous_cpu)
        lines.append(
            f"| {rung.name} | {wall[rung.name].median_ms():.2f} | {ratio} | {cost} "
            f"| {cpu_ratio} | {cpu_cost} |"
        )
    return lines


def section(models, results, rounds: int, steps: int, seconds: float) -> str:
    """This benchmark's section of docs/performance.md."""
    tables = []
    for spec, samples in zip(models, results, strict=True):
        tables += [*table_lines(spec, samples), ""]
    return "\n".join(
        [
            SECTION,
            "",
            "Generated by `benchmarks/step_pieces.py --output docs/performance.md` (which "
            "rewrites this section only).",
            "",
            *environment_lines(),
            f"- Benchmark run time: {seconds:.0f} s, {rounds} rounds of {steps} steps per setup",
            "",
            "A ladder of setups, each adding one piece of what runs in the watched step "
            "(`Guard.apply`'s named steps and the model hook's counter), the others switched "
            "off by replacing their step on the benchmark's own watcher: `read-back` (the "
            "train-step wrapper, the statistics fetched with Keras's logs, and the doctor's "
            "Python work after each step: reading them, the detectors, the snapshots), "
            "`+ check` (the fused sum of squares, the finite test, the `cond` around the "
            "update), `+ stash` (the "
            "skip branch keeping the failing batch and draws), `+ norms` (the statistics "
            "vector written each step), `+ zero streaks`, `+ counter` (= the cheap mode), "
            "`+ layer ring` (per-layer statistics: the gradient-norm ring each step, the rest "
            "one step in ten), `+ headroom` (= full monitoring). In one process, after a "
            "one-step `fit` that traces each setup's step, steps are driven as `fit` drives "
            "them (the train function between the doctor's batch callbacks; Keras's own "
            "callbacks, alike for all, left out), Adam, synthetic data, fixed seeds: one "
            "step of every setup in turn, the order rotating and reversing from step to "
            "step, because the machine is shared with other engineers' jobs and its speed "
            "swings within seconds. A ratio is the median of the per-round ratios of "
            "median step times to plain's (IQR in brackets); a piece's cost is the median "
            "of the per-round differences from the setup before, in percent of plain's "
            "step time (so the pieces' medians need not add up exactly "
            "to the last ratio). A difference inside about +-2% is within this machine's "
            "noise. The CPU columns are the same in the process's CPU time (all its threads), "
            "which other processes disturb less, but which does not see work moved off the "
            "step's critical path.",
            "",
            *tables,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, metavar="N", help="default 30")
    parser.add_argument("--steps", type=int, default=20, metavar="N", help="per round, default 20")
    parser.add_argument("--only", metavar="TEXT", help="only the models whose name has TEXT")
    parser.add_argument("--output", metavar="PATH", help="also write the section into this page")
    options = parser.parse_args(argv)
    models = tuple(m for m in MODELS if options.only is None or options.only in m.name)
    started = time.perf_counter()
    results = measure(options.rounds, options.steps, models)
    seconds = time.perf_counter() - started
    for spec, samples in zip(models, results, strict=True):
        print("\n".join(table_lines(spec, samples)) + "\n")
    if options.output:
        write_section(
            options.output,
            SECTION,
            section(models, results, options.rounds, options.steps, seconds),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
