"""Per-step overhead of `gradient_doctor.Doctor` on `model.fit`, next to check_numerics.

Runs small models (an MLP, a CNN, one transformer block, and the MLP or an embedding
under the training set-ups of issue 6: mixed_float16, jit_compile=True,
steps_per_execution=4, sparse embedding gradients) on synthetic data in one process,
each under four setups:

- ``plain``: `model.fit` as is;
- ``cheap``: watched by `gradient_doctor.Doctor(verbose=False, layer_stats=False)`
  (the global checks only);
- ``doctor`` (the "full" columns): watched by `gradient_doctor.Doctor(verbose=False)`,
  the default, with per-layer statistics and risky-op headroom;
- ``check_numerics``: with `tf.debugging.enable_check_numerics()` switched on.

Each fit is timed step by step by a callback (the time from `on_train_batch_begin`
to `on_train_batch_end`, which includes Keras's own per-step host sync); the first
steps of each fit (tracing, warm-up) are dropped. A watched model keeps its doctor
(and so its traced, watched step) for all its fits, as under `gradient-doctor run`.
Each round runs every model under every setup, in an order that alternates between
rounds, so that the machine's noise hits the setups alike. The table reports each
setup's median step time over all rounds and its ratio to plain: the median, and the
interquartile range, of the per-round ratios of median step times.

check_numerics is global to the thread: it is switched on only around its own fits
(`enable_check_numerics` before, `disable_check_numerics` after), on separate model
instances whose train function was traced while it was on. The plain and doctor
models are always traced and run while it is off.

check_numerics cannot run a step compiled with XLA (it fails there): that column says so.

Usage:
    .venv/bin/python benchmarks/overhead.py [--quick] [--only TEXT] [--output docs/performance.md]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import gradient_doctor  # noqa: E402
from gradient_doctor.tf_adapter.watcher import Watcher  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from page_sections import sections_from  # noqa: E402

# The sections of docs/performance.md that the other benchmarks write (kept on a rewrite).
KEPT_SECTIONS = (
    "## What each piece costs (`benchmarks/step_pieces.py`)",
    "## Inline eager loops (`benchmarks/eager_loop.py`)",
    "## Snapshot ring (`benchmarks/snapshot_ring.py`)",
    "## PyTorch (`benchmarks/torch_overhead.py`)",
    "## The session's Python work per step (`benchmarks/session_step.py`)",
)

SEED = 1234
TARGET_RATIO = 1.05
SETUPS = ("plain", "cheap", "doctor", "check_numerics")
FULL_TARGET_RATIO = 1.10


@dataclass(frozen=True)
class ModelSpec:
    """One benchmark model.

    Attributes:
        name: the name shown in the table.
        build: returns a new, uncompiled model.
        input_shape: shape of one example.
        batch_size: examples per step.
        timed_steps: steps timed per fit in a full run (about 1-1.5 s of steps
            here), so that a fit's median averages over the machine's short
            slow spells.
        policy: the Keras dtype policy the model is built and compiled under
            (e.g. "mixed_float16"), or None for float32.
        compile_options: extra `model.compile` arguments (`jit_compile`,
            `steps_per_execution`).
        vocabulary: when > 0, the inputs are integer ids below it (an embedding).
        optimizer: makes the optimizer; None for Adam(1e-4).
        no_check_numerics: why check_numerics cannot run this model, or None.
    """

    name: str
    build: Callable[[], keras.Model]
    input_shape: tuple[int, ...]
    batch_size: int
    timed_steps: int
    policy: str | None = None
    compile_options: dict = field(default_factory=dict)
    vocabulary: int = 0
    optimizer: Callable[[], keras.optimizers.Optimizer] | None = None
    no_check_numerics: str | None = None

    @property
    def steps_per_call(self) -> int:
        """Steps Keras runs per call of the train function (`steps_per_execution`)."""
        return int(self.compile_options.get("steps_per_execution", 1))

    def setups(self) -> tuple[str, ...]:
        """The setups this model runs under."""
        return SETUPS if self.no_check_numerics is None else ("plain", "cheap", "doctor")


@dataclass(frozen=True)
class RunConfig:
    """How long to measure.

    Attributes:
        rounds: rounds of interleaved fits per model.
        warmup_steps: steps dropped at the start of each fit.
        step_scale: multiplies each model's `timed_steps`.
    """

    rounds: int
    warmup_steps: int
    step_scale: float

    def timed_steps(self, spec: ModelSpec) -> int:
        """Steps timed in each fit of `spec` after the warm-up."""
        return max(5, round(spec.timed_steps * self.step_scale))


FULL = RunConfig(rounds=30, warmup_steps=3, step_scale=0.34)
QUICK = RunConfig(rounds=3, warmup_steps=5, step_scale=0.5)


@dataclass
class Samples:
    """Per-step times (seconds) of one model under one setup, grouped by round."""

    rounds: list[list[float]] = field(default_factory=list)

    def median_ms(self) -> float:
        """Median step time over all rounds, in milliseconds."""
        return 1000.0 * statistics.median(t for r in self.rounds for t in r)


Results = list[tuple[ModelSpec, dict[str, Samples]]]


def build_mlp() -> keras.Model:
    """MLP 784 -> 3 x 512 relu -> 10."""
    inputs = keras.Input((784,))
    x = inputs
    for _ in range(3):
        x = keras.layers.Dense(512, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x), name="mlp")


def build_cnn() -> keras.Model:
    """28x28x1 -> Conv 32 -> Conv 64 -> max pool -> dense 10."""
    inputs = keras.Input((28, 28, 1))
    x = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
    x = keras.layers.Conv2D(64, 3, activation="relu")(x)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x), name="cnn")


def build_transformer() -> keras.Model:
    """One post-norm transformer block (4 heads, key_dim 32, d_model 128, FFN 256)."""
    inputs = keras.Input((32, 128))
    attention = keras.layers.MultiHeadAttention(num_heads=4, key_dim=32)(inputs, inputs)
    x = keras.layers.LayerNormalization()(inputs + attention)
    ffn = keras.layers.Dense(256, activation="relu")(x)
    ffn = keras.layers.Dense(128)(ffn)
    x = keras.layers.LayerNormalization()(x + ffn)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x), name="transformer")


class MLPWithUnusedHead(keras.Model):
    """The MLP plus a head that is built but never called: its 2 variables get None.

    Measures that diagnosing missing gradients costs nothing per step: the doctor
    finds the break once, while the step is traced.
    """

    def __init__(self) -> None:
        super().__init__()
        self.body = build_mlp()
        self.unused_head = keras.layers.Dense(10)

    def build(self, input_shape) -> None:
        self.body.build(input_shape)
        self.unused_head.build((None, 512))

    def call(self, x):
        return self.body(x)


def build_mlp_with_unused_head() -> keras.Model:
    model = MLPWithUnusedHead()
    model.build((None, 784))
    return model


EMBEDDING_VOCABULARY = 100_000


def build_embedding() -> keras.Model:
    """Ids (16 per example) -> embedding 100,000 x 32 -> mean -> dense 10."""
    inputs = keras.Input((16,), dtype="int32")
    x = keras.layers.Embedding(EMBEDDING_VOCABULARY, 32)(inputs)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x), name="embedding")


XLA_FAILS = "n/a: fails under XLA"
MLP_NAME = "MLP 784-3x512-10, batch 128"

MODELS = (
    ModelSpec(MLP_NAME, build_mlp, (784,), 128, timed_steps=60),
    ModelSpec("CNN conv32-conv64-pool-dense, batch 64", build_cnn, (28, 28, 1), 64, 15),
    ModelSpec("transformer block d128 h4 seq32, batch 32", build_transformer, (32, 128), 32, 40),
    ModelSpec(
        "MLP + unused head (None gradients), batch 128",
        build_mlp_with_unused_head,
        (784,),
        128,
        timed_steps=60,
    ),
    ModelSpec(
        f"{MLP_NAME}, mixed_float16 (LossScaleOptimizer)",
        build_mlp,
        (784,),
        128,
        timed_steps=60,
        policy="mixed_float16",
    ),
    ModelSpec(
        "embedding 100000x32, sparse gradients (SGD), batch 64",
        build_embedding,
        (16,),
        64,
        timed_steps=60,
        vocabulary=EMBEDDING_VOCABULARY,
        optimizer=lambda: keras.optimizers.SGD(1e-2),
    ),
    ModelSpec(
        f"{MLP_NAME}, jit_compile=True",
        build_mlp,
        (784,),
        128,
        timed_steps=60,
        compile_options={"jit_compile": True},
        no_check_numerics=XLA_FAILS,
    ),
    ModelSpec(
        f"{MLP_NAME}, steps_per_execution=4",
        build_mlp,
        (784,),
        128,
        timed_steps=60,
        compile_options={"steps_per_execution": 4},
    ),
)


class StepTimer(keras.callbacks.Callback):
    """Records the wall time of each training step after the first `skip` steps.

    Put it last in `callbacks`, so that its `on_train_batch_end` runs after the
    other callbacks' (the doctor's read-back is then inside the timed interval).
    With `steps_per_call` > 1 (steps_per_execution), Keras calls the callbacks once
    per call: each call's time is shared by its steps.
    """

    def __init__(self, skip: int, steps_per_call: int = 1) -> None:
        super().__init__()
        self.skip = skip
        self.steps_per_call = steps_per_call
        self.times: list[float] = []
        self._start = 0.0

    def on_train_batch_begin(self, batch, logs=None) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None) -> None:
        elapsed = time.perf_counter() - self._start
        if batch >= self.skip:
            self.times.append(elapsed / self.steps_per_call)


def make_dataset(spec: ModelSpec, batches: int = 8) -> tf.data.Dataset:
    """A small repeating dataset of random inputs and integer labels (fixed seed)."""
    rng = np.random.default_rng(SEED)
    count = batches * spec.batch_size
    if spec.vocabulary:
        x = rng.integers(0, spec.vocabulary, size=(count, *spec.input_shape), dtype=np.int32)
    else:
        x = rng.standard_normal((count, *spec.input_shape), dtype=np.float32)
    y = rng.integers(0, 10, size=(count,), dtype=np.int32)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(spec.batch_size)
    return dataset.cache().repeat().prefetch(2)


def make_model(spec: ModelSpec) -> keras.Model:
    """A compiled model with the same initial weights every time (fixed seed).

    A model built under a dtype policy keeps it (and Keras wraps its optimizer in a
    LossScaleOptimizer for mixed_float16); the global policy is restored after.
    """
    keras.utils.set_random_seed(SEED)
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(spec.policy or "float32")
    try:
        model = spec.build()
        model.compile(
            optimizer=spec.optimizer() if spec.optimizer else keras.optimizers.Adam(1e-4),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            **spec.compile_options,
        )
    finally:
        keras.mixed_precision.set_global_policy(previous)
    return model


@contextlib.contextmanager
def check_numerics_on() -> Iterator[None]:
    """Switch `tf.debugging.enable_check_numerics` on for the block only."""
    tf.debugging.enable_check_numerics()
    try:
        yield
    finally:
        tf.debugging.disable_check_numerics()


@dataclass
class Contestant:
    """One setup of one model: its own compiled model and, when watched, its doctor."""

    model: keras.Model
    callbacks: list[keras.callbacks.Callback]


def doctor_for(setup: str) -> list[keras.callbacks.Callback]:
    """The doctor of a watched setup, kept for every fit of its model (none for others).

    Each doctor reports to a watcher of its own that outlives the fit, as under
    `gradient-doctor run`: its hooks stay on the model, so the watched step is
    traced once, not again at every fit.
    """
    if setup not in ("cheap", "doctor"):
        return []
    # Full monitoring (per-layer statistics) is the default; cheap keeps the global checks.
    watcher = Watcher(layer_stats=setup == "doctor")
    return [gradient_doctor.Doctor(verbose=False, watcher=watcher)]


def timed_fit(
    contestant: Contestant,
    dataset: tf.data.Dataset,
    setup: str,
    steps: int,
    skip: int,
    steps_per_call: int = 1,
) -> list[float]:
    """Run one `model.fit` of `steps` steps under `setup`.

    Args:
        contestant: the setup's own compiled model and callbacks.
        dataset: the repeating training data.
        setup: one of `SETUPS`.
        steps: steps in the fit.
        skip: warm-up steps not timed.
        steps_per_call: the model's `steps_per_execution`.

    Returns:
        The durations (seconds) of the steps after the first `skip`.
    """
    model = contestant.model
    timer = StepTimer(skip=skip, steps_per_call=steps_per_call)
    callbacks = [*contestant.callbacks, timer]
    guard = check_numerics_on() if setup == "check_numerics" else contextlib.nullcontext()
    with guard:
        model.fit(
            dataset,
            epochs=1,
            steps_per_epoch=steps,
            callbacks=callbacks,
            verbose=0,
            shuffle=False,
        )
    return timer.times


def new_model_set(spec: ModelSpec) -> dict[str, Contestant]:
    """One model instance per setup, all with the same initial weights.

    Separate instances keep one setup's instrumentation (the doctor's optimizer
    hook, check_numerics's traced ops) from leaking into another's.
    """
    return {setup: Contestant(make_model(spec), doctor_for(setup)) for setup in spec.setups()}


def measure_all(config: RunConfig, models: tuple[ModelSpec, ...] = MODELS) -> Results:
    """All rounds for all models.

    Each round runs every model once under every setup; the setup order
    alternates between rounds (plain, doctor, check_numerics, then reversed), so
    that slow periods of a noisy machine are shared by the setups being compared.
    """
    started = time.perf_counter()
    datasets = [make_dataset(spec) for spec in models]
    model_sets = [new_model_set(spec) for spec in models]
    results = [(spec, {setup: Samples() for setup in spec.setups()}) for spec in models]
    for round_index in range(config.rounds):
        for dataset, models_by_setup, (spec, samples) in zip(
            datasets, model_sets, results, strict=True
        ):
            setups = spec.setups()
            order = setups if round_index % 2 == 0 else tuple(reversed(setups))
            # Whole calls of the train function: steps_per_execution must divide the fit.
            per_call = spec.steps_per_call
            timed = -(-config.timed_steps(spec) // per_call) * per_call
            warmup = -(-config.warmup_steps // per_call) * per_call
            for setup in order:
                times = timed_fit(
                    models_by_setup[setup], dataset, setup, warmup + timed, warmup, per_call
                )
                samples[setup].rounds.append(times)
        elapsed = time.perf_counter() - started
        print(f"round {round_index + 1}/{config.rounds} done ({elapsed:.0f} s)", file=sys.stderr)
    return results


@dataclass(frozen=True)
class Ratio:
    """Ratio of a setup's median step time to plain's, with per-round quartiles."""

    median: float
    q1: float
    q3: float

    def __str__(self) -> str:
        return f"{self.median:.2f}x ({self.q1:.2f}-{self.q3:.2f})"


def ratio_to_plain(samples: dict[str, Samples], setup: str) -> Ratio:
    """Median and quartiles of the per-round ratios of `setup`'s to plain's median step.

    Pairing by round makes the ratio robust to slow periods of the machine that
    the pooled medians still feel.
    """
    per_round = [
        statistics.median(s) / statistics.median(p)
        for s, p in zip(samples[setup].rounds, samples["plain"].rounds, strict=True)
    ]
    if len(per_round) >= 2:
        q1, _, q3 = statistics.quantiles(per_round, n=4, method="inclusive")
    else:
        q1 = q3 = per_round[0]
    return Ratio(statistics.median(per_round), q1, q3)


TABLE_HEADER = (
    "| model | plain ms/step | cheap ratio (IQR) | full ms/step | full ratio (IQR) "
    "| check_numerics ms/step | check_numerics ratio (IQR) |\n"
    "|---|---:|---:|---:|---:|---:|---:|"
)


def table_row(spec: ModelSpec, samples: dict[str, Samples], config: RunConfig) -> str:
    """One Markdown table row for a model."""
    cells = [
        f"{spec.name} ({config.timed_steps(spec)} timed steps/fit)",
        f"{samples['plain'].median_ms():.2f}",
        str(ratio_to_plain(samples, "cheap")),
        f"{samples['doctor'].median_ms():.2f}",
        str(ratio_to_plain(samples, "doctor")),
    ]
    if "check_numerics" in samples:
        cells += [
            f"{samples['check_numerics'].median_ms():.2f}",
            str(ratio_to_plain(samples, "check_numerics")),
        ]
    else:
        cells += [spec.no_check_numerics or "n/a", ""]
    return "| " + " | ".join(cells) + " |"


def table_lines(results: Results, config: RunConfig) -> list[str]:
    """The results table, header included."""
    return [TABLE_HEADER, *(table_row(spec, samples, config) for spec, samples in results)]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else `platform.processor()`."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def source_revision() -> str:
    """The checkout's git revision (with `-dirty` for uncommitted changes), or "unknown"."""
    try:
        found = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=os.path.dirname(os.path.abspath(__file__)),
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return found.stdout.strip() or "unknown"


def environment_lines() -> list[str]:
    """Date, versions and CPU, as Markdown list items."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"- Date: {now}",
        f"- Python {platform.python_version()}, TensorFlow {tf.__version__}, "
        f"Keras {keras.__version__}, NumPy {np.__version__}, "
        f"gradient_doctor {gradient_doctor.__version__} (git {source_revision()})",
        f"- CPU: {cpu_model()}, {os.cpu_count()} logical cores (nproc), "
        f"platform.processor() = {platform.processor() or 'n/a'!r}, {platform.platform()}",
    ]


def method_lines(config: RunConfig, mode: str) -> list[str]:
    """The measuring method in a few sentences."""
    return [
        f"In one process, each of {config.rounds} rounds runs one `model.fit` per model and "
        "setup (setup order alternating between rounds; synthetic data, fixed seeds, Adam), "
        f"and times each step after the first {config.warmup_steps} (warm-up) from "
        "`on_train_batch_begin` to `on_train_batch_end` of a callback placed last, so a step "
        "includes Keras's per-step host sync and the doctor's read-back. "
        "A watched model keeps its doctor across the rounds, as under `gradient-doctor run` "
        "(the watched step is traced once). "
        "ms/step is the median over all rounds; a ratio is the median of the per-round ratios "
        "of median step times to plain's, with their interquartile range in brackets "
        "(on a noisy machine, read a ratio together with its bracket).",
        "",
        "`tf.debugging.enable_check_numerics()` is switched on only around its own fits and "
        "off again with `disable_check_numerics()`, on separate model instances traced while "
        "it was on; plain and doctor models are traced and run with it off. "
        f"Run mode: {mode}.",
    ]


def render_markdown(results: Results, config: RunConfig, mode: str, seconds: float) -> str:
    """The whole performance page."""
    lines = [
        "# Performance: overhead of watching `model.fit`",
        "",
        f"Target: the cheap mode costs at most {TARGET_RATIO:.2f}x plain step time, full "
        f"monitoring (the default) at most {FULL_TARGET_RATIO:.2f}x.",
        "",
        "Generated by `benchmarks/overhead.py` (do not edit by hand; rerun it).",
        "",
        *environment_lines(),
        f"- Benchmark run time: {seconds:.0f} s",
        "",
        "## Method",
        "",
        *method_lines(config, mode),
        "",
        "## Results",
        "",
        *table_lines(results, config),
        "",
        *HOT_PATH_LINES,
        "",
    ]
    return "\n".join(lines)


# How the watched step is kept cheap: what the per-piece table below measures.
HOT_PATH_LINES = [
    "What runs every step is `Guard.apply` in `tf_adapter/step/guard.py`, a few named steps "
    "(`_check`, `_update_or_skip`, `_measure`, `_record`), plus the model hook's step "
    "counter. They stay cheap by: one `l2_loss` per gradient stacked into one vector "
    "(one sum gives the global norm and the finite test, one `equal` the zero streaks, "
    "one segment sum the layers' gradient-norm ring); one read of the statistics "
    "variable per update; the statistics vector written from the verdict, beside the "
    "update rather than after it (off the step's critical path; only under XLA on a "
    "CPU does it read the branch's output, which keeps the branch a conditional); "
    "the sampled update norms as a third branch of the update's `switch_case`, not a "
    "`cond` nested in every update; nothing copied on the happy path (the stash and "
    "random draws are written only in the skip branch); and, eagerly, the check and "
    "the record traced once per optimizer and variable list into one `tf.function` "
    "call. The check itself is never skipped: every update's gradients and loss are "
    "tested before the update can reach the weights.",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds (~1 min)")
    parser.add_argument("--output", metavar="PATH", help="also write the Markdown report here")
    parser.add_argument(
        "--rounds", type=int, metavar="N", help="rounds per model (default 30; quick 3)"
    )
    parser.add_argument(
        "--only",
        metavar="TEXT",
        action="append",
        help="run only the models whose name contains TEXT (repeatable)",
    )
    parser.add_argument(
        "--skip",
        metavar="TEXT",
        action="append",
        help="leave out the models whose name contains TEXT (repeatable)",
    )
    return parser.parse_args(argv)


def selected_models(patterns: list[str] | None) -> tuple[ModelSpec, ...]:
    """The models whose name contains one of `patterns` (all of them when None).

    Raises:
        SystemExit: no model matches.
    """
    if not patterns:
        return MODELS
    chosen = tuple(spec for spec in MODELS if any(p in spec.name for p in patterns))
    if not chosen:
        names = "\n  ".join(spec.name for spec in MODELS)
        raise SystemExit(f"--only matched no model. Received: {patterns}. Models:\n  {names}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table and optionally write the report."""
    args = parse_args(argv)
    config = QUICK if args.quick else FULL
    mode = "quick" if args.quick else "full"
    if args.rounds:
        config = dataclasses.replace(config, rounds=args.rounds)
        mode += f", {args.rounds} rounds"
    started = time.perf_counter()
    models = tuple(
        spec
        for spec in selected_models(args.only)
        if not any(text in spec.name for text in args.skip or ())
    )
    if args.skip:
        mode += ", without " + ", ".join(repr(text) for text in args.skip)
    results = measure_all(config, models)
    seconds = time.perf_counter() - started
    print("\n".join(table_lines(results, config)))
    print(f"total time: {seconds:.0f} s ({mode})", file=sys.stderr)
    if args.output:
        # The sections the other benchmarks write into the same page are kept.
        kept = sections_from(args.output, KEPT_SECTIONS)
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(render_markdown(results, config, mode, seconds))
            if kept:
                out.write("\n" + kept)
    return 0


if __name__ == "__main__":
    sys.exit(main())
