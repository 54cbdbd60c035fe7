"""Per-step cost of watching a PyTorch training step, beside `torch.autograd.detect_anomaly`.

Three models on the CPU (an MLP, a small CNN, a transformer encoder block), each
trained with Adam on synthetic data under three setups, in one process:

- ``plain``: the step as the user wrote it (forward, `loss.backward()`, `optimizer.step()`);
- ``watched``: the same step under `gradient_doctor.torch.watch` (the fused finite
  check of the loss and gradients, one host read, before each update);
- ``anomaly``: the same step inside `torch.autograd.detect_anomaly()` (PyTorch's own
  NaN hunt: a forward traceback kept for every autograd node, each backward output
  checked).

Each setup has its own model and optimizer with the same initial weights. Each step
is timed from the call to its return, in wall time and in the process's CPU time
(which other processes on a shared machine disturb less). Each round runs a short
block of steps of every setup, in an order that alternates between rounds, so a slow
spell of the machine hits the setups alike; the first step of a block is dropped
(warm-up). A ratio is the median of the per-round ratios of median step times to
plain's, with their interquartile range in brackets.

Usage:
    .venv/bin/python benchmarks/torch_overhead.py [--quick] [--rounds N] [--block N]
        [--threads N] [--output docs/performance.md]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from page_sections import sections_from, write_section  # noqa: E402

import gradient_doctor  # noqa: E402
import gradient_doctor.torch  # noqa: E402
from gradient_doctor.core.records import LAYER_STATS_EVERY  # noqa: E402
from gradient_doctor.torch_adapter.step.sample_schedule import (  # noqa: E402
    BUDGET,
    WARMUP_STEPS,
    SampleSchedule,
)

SEED = 1234
TARGET_RATIO = 1.05
SETUPS = ("plain", "watched", "anomaly")
SECTION = "## PyTorch (`benchmarks/torch_overhead.py`)"
# The subsection `torch_step_pieces.py` writes at the end of this one, kept when rewriting it.
PIECES_SECTION = "### What each piece of the watched step costs"


@dataclass(frozen=True)
class Workload:
    """A model and the batch it trains on.

    Attributes:
        name: the row's name.
        build: makes the model (seeded by the caller).
        batch: makes (inputs, targets).
        loss: the loss of the model's output and the targets.
    """

    name: str
    build: Callable[[], nn.Module]
    batch: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class _Block(nn.Module):
    """A transformer encoder block over token embeddings, mean-pooled to 10 classes."""

    def __init__(self, vocab: int = 1000, width: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.block = nn.TransformerEncoderLayer(
            width, nhead=4, dim_feedforward=4 * width, dropout=0.1, batch_first=True
        )
        self.head = nn.Linear(width, 10)

    def forward(self, tokens):
        return self.head(self.block(self.embed(tokens)).mean(dim=1))


def _classes(generator, rows: int) -> torch.Tensor:
    return torch.randint(0, 10, (rows,), generator=generator)


WORKLOADS = (
    Workload(
        "MLP 784-256-256-10, batch 64",
        lambda: nn.Sequential(
            nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
        ),
        lambda g: (torch.randn(64, 784, generator=g), _classes(g, 64)),
        nn.functional.cross_entropy,
    ),
    Workload(
        "CNN 2 conv (16, 32 ch) + dense, 28x28, batch 32",
        lambda: nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 7 * 7, 10),
        ),
        lambda g: (torch.randn(32, 1, 28, 28, generator=g), _classes(g, 32)),
        nn.functional.cross_entropy,
    ),
    Workload(
        "Transformer block (width 128, 4 heads), 32 tokens, batch 16",
        _Block,
        lambda g: (torch.randint(0, 1000, (16, 32), generator=g), _classes(g, 16)),
        nn.functional.cross_entropy,
    ),
)


@dataclass
class Timings:
    """Per-step times of one setup, by round: wall and CPU seconds."""

    wall: list[list[float]] = field(default_factory=list)
    cpu: list[list[float]] = field(default_factory=list)


def _step_of(model: nn.Module, optimizer: torch.optim.Optimizer, loss_of) -> Callable:
    def train_step(x, y):
        optimizer.zero_grad()
        loss = loss_of(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return train_step


def _setups(workload: Workload) -> dict[str, Callable]:
    """One step per setup, each with its own model and optimizer, the same initial weights."""
    steps = {}
    for setup in SETUPS:
        torch.manual_seed(SEED)
        model = workload.build()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        step = _step_of(model, optimizer, workload.loss)
        if setup == "watched":
            step = gradient_doctor.torch.watch(
                step, model=model, optimizer=optimizer, verbose=False, trial_steps=0
            )
        elif setup == "anomaly":
            step = _under_anomaly_detection(step)
        steps[setup] = step
    return steps


def _under_anomaly_detection(step: Callable) -> Callable:
    def anomaly_step(x, y):
        with torch.autograd.detect_anomaly():
            return step(x, y)

    return anomaly_step


def measure(workload: Workload, rounds: int, block: int) -> dict:
    """Time each setup's first `WARMUP_STEPS` steps (`early`: the doctor samples one in
    ten there), then `rounds` blocks of `block` steps (`steady`), interleaved; and the
    sampling period the watched run ended with (`period`)."""
    steps = _setups(workload)
    generator = torch.Generator().manual_seed(SEED)
    batches = [workload.batch(generator) for _ in range(8)]
    early_block = 20
    phases = {
        "early": _rounds(steps, batches, WARMUP_STEPS // (early_block + 1), early_block),
        "steady": _rounds(steps, batches, rounds, block),
    }
    phases["period"] = steps["watched"].adapter.stats.schedule.period
    return phases


def _rounds(steps: dict[str, Callable], batches, rounds: int, block: int) -> dict[str, Timings]:
    """Time `rounds` blocks of `block` steps of each setup, the order alternating."""
    timings = {setup: Timings() for setup in SETUPS}
    for index in range(rounds):
        order = SETUPS if index % 2 == 0 else SETUPS[::-1]
        for setup in order:
            wall, cpu = [], []
            for n in range(block + 1):
                x, y = batches[n % len(batches)]
                w0, c0 = time.perf_counter(), time.process_time()
                steps[setup](x, y)
                w1, c1 = time.perf_counter(), time.process_time()
                if n:  # the block's first step warms up
                    wall.append(w1 - w0)
                    cpu.append(c1 - c0)
            timings[setup].wall.append(wall)
            timings[setup].cpu.append(cpu)
    return timings


def _ratio(
    timings: dict[str, Timings], setup: str, clock: str, center=statistics.median
) -> tuple[float, float, float]:
    """Median and quartiles of the per-round ratios of median (or, with `center`, mean)
    step times to plain's."""
    mine, plain = getattr(timings[setup], clock), getattr(timings["plain"], clock)
    ratios = sorted(center(m) / center(p) for m, p in zip(mine, plain))
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return median, q1, q3


def _ms(timings: Timings, clock: str) -> float:
    return 1000 * statistics.median(t for block in getattr(timings, clock) for t in block)


def table(results: dict[str, dict]) -> list[str]:
    """The results as a Markdown table: ms/step and ratios to plain, wall and CPU time,
    of the steady phase; and the mean ratio of the early one."""
    lines = [
        "| model | plain ms/step (wall, CPU) | watched ms/step | watched / plain (wall) "
        "| watched / plain (CPU) | watched / plain (CPU, mean) | first steps: watched / "
        "plain (CPU, mean) | sampled one step in | detect_anomaly ms/step "
        "| detect_anomaly / plain (CPU) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, phases in results.items():
        timings = phases["steady"]
        cells = [name, f"{_ms(timings['plain'], 'wall'):.3f}, {_ms(timings['plain'], 'cpu'):.3f}"]
        cells.append(f"{_ms(timings['watched'], 'wall'):.3f}")
        for clock in ("wall", "cpu"):
            median, q1, q3 = _ratio(timings, "watched", clock)
            cells.append(f"{median:.3f}x [{q1:.3f}, {q3:.3f}]")
        for phase in ("steady", "early"):
            median, q1, q3 = _ratio(phases[phase], "watched", "cpu", statistics.fmean)
            cells.append(f"{median:.3f}x [{q1:.3f}, {q3:.3f}]")
        cells.append(str(phases["period"]))
        cells.append(f"{_ms(timings['anomaly'], 'wall'):.3f}")
        median, q1, q3 = _ratio(timings, "anomaly", "cpu")
        cells.append(f"{median:.2f}x [{q1:.2f}, {q3:.2f}]")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def section(results: dict[str, dict], rounds: int, block: int) -> str:
    """The page's PyTorch section: what was run, how, the table, the verdict."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    def mean_ratio(phases, phase: str) -> float:
        return _ratio(phases[phase], "watched", "cpu", statistics.fmean)[0]

    # Judged on the mean: the sampled steps are part of what watching costs.
    worst = max(mean_ratio(phases, "steady") for phases in results.values())
    worst_early = max(mean_ratio(phases, "early") for phases in results.values())
    verdict = "within" if worst <= TARGET_RATIO else "above"
    early_steps = WARMUP_STEPS // 21 * 20
    lines = [
        SECTION,
        "",
        f"- Date: {now}",
        f"- Python {platform.python_version()}, torch {torch.__version__}, "
        f"gradient_doctor {gradient_doctor.__version__}",
        f"- CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores; "
        f"torch threads: {torch.get_num_threads()}; deterministic algorithms: "
        f"{torch.are_deterministic_algorithms_enabled()}",
        "",
        "In one process, each setup first runs its first steps in blocks of 20 (`first "
        f"steps`: {early_steps} timed, the doctor's warm-up, in which it samples one step in "
        f"{LAYER_STATS_EVERY}), then each of {rounds} rounds runs {block} steps of each "
        "setup; each block's first step warms up and is not timed; the setups' order "
        "alternates between rounds. Adam, synthetic data, fixed seeds, each setup its own "
        "model with the same initial weights. `watched` is "
        "`gradient_doctor.torch.watch(step, model=, optimizer=)` (fix trials off: they run "
        "only after a failure); `detect_anomaly` is the step inside "
        "`torch.autograd.detect_anomaly()`. A step is timed from its call to its return. "
        "ms/step is the median over the rounds after the first steps; a ratio is the "
        "median of the per-round ratios of median step times to plain's, [interquartile "
        "range]; the mean columns take each round's mean step time instead, so they count "
        "the steps whose per-module statistics are sampled (module hooks, a copy of the "
        "parameters around the update, one host read), which a median skips.",
        "",
        *table(results),
        "",
        f"Target for watching: at most {TARGET_RATIO:.2f}x plain (CPU time, mean); worst row "
        f"after the first steps: {worst:.3f}x, {verdict} the target (over the first steps: "
        f"{worst_early:.3f}x); {_rows_by_target(results)}. What watching adds to a step does "
        "not grow with its arithmetic, so the ratio is highest for a short, memory-bound "
        "step (the MLP) and falls as the step's compute grows. `torch_step_pieces.py` "
        "(below) takes the MLP's watched step apart inside training, each piece switched "
        "off in turn: the check is the largest piece, ~100 us a step (its "
        "`torch._foreach_norm`, one more read of every gradient right before the "
        "optimizer's own, ~37 us of it alone; one `torch.stack` of the norms and the loss "
        "and its host read the rest); then the sampled steps (module hooks and a "
        "`TorchFunctionMode` on the forward, the parameter copy around the update, the "
        "host read, and every step's per-module gradient norms since the last sample, made "
        "into records and fed to the detectors: ~2.9 ms more than another step, once a "
        "period); then the detectors and the run's series, "
        "~20 us a step (the steps' records are fed every few steps, a step at a "
        "time: fed one step at a time they cost several times more, the training between "
        "them taking the detectors' state out of the caches); the random state kept for a "
        "replay, the `backward()` roots, the guard and the session's bookkeeping, the rest. "
        "A piece costs more inside the step than alone, for the same reason (the check "
        "~48 us alone). The check by itself takes about 5% of the MLP's "
        "step, so the 5% target is out of reach for the MLP on these CPUs unless fewer "
        "than all updates were checked, which the doctor does not do. After its first "
        f"{WARMUP_STEPS} steps (sampled one in {LAYER_STATS_EVERY}) the doctor times the "
        f"run's own steps and samples one in {_periods()}, the shortest period whose "
        f"sampled steps add at most {BUDGET:.0%} to the step time "
        "(`torch_adapter/step/sample_schedule.py`; the period each watched run ended with "
        "is in the table; the detectors' work on a sampled step's records comes after the "
        "step's end the schedule times, so it is not in that budget). A device-side skip "
        "through a fused optimizer's `found_inf` (as `GradScaler` uses) would fold the "
        "check into the update's own pass; it is not measured here.",
        "",
    ]
    return "\n".join(lines)


def _periods() -> str:
    """The sampling periods a watched run may take, as a phrase ("10, 20 or 40")."""
    periods = [str(period) for period in SampleSchedule().periods]
    return f"{', '.join(periods[:-1])} or {periods[-1]}"


def _rows_by_target(results: dict[str, dict]) -> str:
    """Which rows are within the target and which above it (CPU time, mean), in words."""
    by_verdict: dict[str, list[str]] = {"within": [], "above": []}
    for name, phases in results.items():
        ratio = _ratio(phases["steady"], "watched", "cpu", statistics.fmean)[0]
        by_verdict["within" if ratio <= TARGET_RATIO else "above"].append(
            f"{name.split()[0]} {ratio:.3f}x"
        )
    return "; ".join(
        f"{verdict} it: {', '.join(rows)}" for verdict, rows in by_verdict.items() if rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--block", type=int, default=40, help="steps per setup per round")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 5 steps")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--output", help="write the PyTorch section of this Markdown page")
    options = parser.parse_args(argv)
    rounds, block = (3, 5) if options.quick else (options.rounds, options.block)
    torch.set_num_threads(options.threads)
    torch.use_deterministic_algorithms(True)
    results = {}
    with warnings.catch_warnings(), contextlib.redirect_stderr(sys.stdout):
        warnings.simplefilter("ignore")  # detect_anomaly warns each time it is entered
        for workload in WORKLOADS:
            results[workload.name] = measure(workload, rounds, block)
            print(f"measured: {workload.name}", file=sys.__stderr__, flush=True)
    text = section(results, rounds, block)
    print(text)
    if options.output:
        pieces = sections_from(options.output, (PIECES_SECTION,))
        write_section(options.output, SECTION, text + ("\n" + pieces if pieces else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
