"""What each piece of a watched PyTorch step costs on the CPU, measured in training's own state.

The MLP of `torch_overhead.py` (its first row, Adam) is trained plain and watched by
`gradient_doctor.torch.watch` in one process, past the doctor's warm-up (its detectors'
windows full, its sampling period fitted to the run), and then measured three ways:

- in the step: the watched step next to copies of it with one piece switched off on
  the benchmark's own watcher (the check: a constant result of the same shape, so
  everything after it runs as before; the detectors and the run's series not fed;
  no sampled step; the random state not copied), in blocks of steps taken in turn,
  the order alternating between rounds. A piece's cost is what the step loses
  without it, with the caches and the allocator as a training step leaves them,
  which is what a run pays (a piece timed alone, its state in the caches, costs
  less: a training step between two calls evicts it);
- the session in the step: `Session.after_step` timed inside the watched steps, per
  step over whole sampling periods, so the sampled steps' burst (every step's
  per-module gradient norms since the last sample, read and fed to the detectors)
  is in it;
- the pieces alone: each piece of the per-update path called in a row on the
  benchmark's own objects, gradients present (the random state, the `backward()`
  roots, the parameter list, the fused check and its parts, the guard around it),
  and a watched step of a two-parameter model next to its plain step, which is all
  that watching adds around an update that costs nothing.

CPU time is the process's (other processes on a shared machine disturb it less than
the wall clock); a round's value is its mean per step (per call); a row is the median
over the rounds, [interquartile range].

Usage:
    .venv/bin/python benchmarks/torch_step_pieces.py [--rounds N] [--quick]
        [--output docs/performance.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from page_sections import write_section  # noqa: E402
from torch_overhead import PIECES_SECTION, SECTION, SEED, WORKLOADS, _step_of  # noqa: E402

import gradient_doctor  # noqa: E402
import gradient_doctor.torch  # noqa: E402
from gradient_doctor.torch_adapter.hooks import watched_step  # noqa: E402
from gradient_doctor.torch_adapter.hooks.backward_roots import backward_roots  # noqa: E402
from gradient_doctor.torch_adapter.step import guarded_step, rng_state  # noqa: E402
from gradient_doctor.torch_adapter.step.guarded_step import StepGuard  # noqa: E402
from gradient_doctor.torch_adapter.step.sample_schedule import WARMUP_STEPS  # noqa: E402
from gradient_doctor.torch_adapter.step.step_check import (  # noqa: E402
    Check,
    _root_of_squares,
    check,
    dense_gradients,
)

HEADING = f"{PIECES_SECTION} (`benchmarks/torch_step_pieces.py`)"
# Steps each setup runs before anything is timed: past the doctor's warm-up.
SETTLE_STEPS = WARMUP_STEPS + 300
BLOCK = 10  # steps of a setup in a row, in the whole-step rounds
BLOCKS = 8  # blocks of each setup a round: 80 steps, the longest sampling period
CALLS = 50  # calls of a piece in a row, in the pieces' rounds


def _clocks() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


class Rows:
    """Per-round values (CPU and wall, microseconds) by row name, in the order first added."""

    def __init__(self) -> None:
        self.cpu: dict[str, list[float]] = {}
        self.wall: dict[str, list[float]] = {}

    def add(self, name: str, cpu: float, wall: float) -> None:
        self.cpu.setdefault(name, []).append(cpu)
        self.wall.setdefault(name, []).append(wall)


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return median, q1, q3


# The watched step's copies, each without one piece (`_switch_off`).
WITHOUT = ("the check", "the detectors and series", "sampled steps", "the random state")
# The pieces switched off by module-level replacements, for the blocks of their setup.
_OFF: set[str] = set()


def _switch_off() -> None:
    """Replace the check and the random state's copy, on the benchmark's own watchers,
    by versions that do nothing while their setup's blocks run (`_OFF`)."""
    real_check, constants = guarded_step.check, {}

    def maybe_check(losses, grads, squares=False):
        if "the check" not in _OFF:
            return real_check(losses, grads, squares)
        if len(grads) not in constants:  # what a finite check reads, everything after it as before
            constants[len(grads)] = Check(True, 2.0, 1.0, [0.5] * len(grads))
        return constants[len(grads)]

    real_state = rng_state.save()

    class RandomState:
        @staticmethod
        def save():
            return real_state if "the random state" in _OFF else rng_state.save()

        restore = staticmethod(rng_state.restore)

    guarded_step.check = maybe_check
    watched_step.rng_state = RandomState


def _setups() -> tuple[dict[str, Callable], list]:
    """The MLP's plain and watched steps and the watched step without each piece (each its
    own model, the same initial weights), and the batches."""
    workload = WORKLOADS[0]
    steps = {}
    for setup in ("plain", "watched", *(f"without {piece}" for piece in WITHOUT)):
        torch.manual_seed(SEED)
        model = workload.build()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        step = _step_of(model, optimizer, workload.loss)
        if setup != "plain":
            step = gradient_doctor.torch.watch(
                step, model=model, optimizer=optimizer, verbose=False, trial_steps=0
            )
            step.model, step.optimizer = model, optimizer
            if setup == "without the detectors and series":
                step.adapter.session._feed = step.adapter.session._unfed.clear
            elif setup == "without sampled steps":
                schedule = step.adapter.stats.schedule
                schedule.periods, schedule.period, schedule._warmup = (10**9,), 10**9, 10**9
        steps[setup] = step
    _switch_off()
    generator = torch.Generator().manual_seed(SEED)
    return steps, [workload.batch(generator) for _ in range(8)]


def _run(steps: dict[str, Callable], setup: str, batch) -> None:
    """One step of `setup`, its pieces switched off while it runs."""
    off = setup.removeprefix("without ")
    if off in WITHOUT:
        _OFF.add(off)
    try:
        steps[setup](*batch)
    finally:
        _OFF.clear()


def whole_steps(steps: dict[str, Callable], batches, rounds: int, rows: Rows) -> None:
    """Each round, `BLOCKS` blocks of `BLOCK` steps of every setup, the setups' order
    rotating from block to block; a setup's round value is its mean step over the round
    (as many steps as the longest sampling period: its sampled steps included). The
    watched steps are also split into sampled ones and the others."""
    watched = steps["watched"]
    stats, session = watched.adapter.stats, watched.adapter.session
    names = list(steps)
    for _ in range(rounds):
        cpu = {name: 0.0 for name in names}
        wall = dict(cpu)
        sampled, other = [], []
        for block in range(BLOCKS):
            order = names[block % len(names) :] + names[: block % len(names)]
            for setup in order if block % 2 == 0 else order[::-1]:
                for n in range(BLOCK):
                    batch = batches[(block * BLOCK + n) % len(batches)]
                    is_sampled = setup == "watched" and stats.samples(session.steps_watched)
                    c0, w0 = _clocks()
                    _run(steps, setup, batch)
                    c1, w1 = _clocks()
                    cpu[setup] += c1 - c0
                    wall[setup] += w1 - w0
                    if setup == "watched":
                        (sampled if is_sampled else other).append(c1 - c0)
        for setup in names:
            steps_run = BLOCKS * BLOCK
            rows.add(f"{setup} step", 1e6 * cpu[setup] / steps_run, 1e6 * wall[setup] / steps_run)
        rows.add("_other", 1e6 * statistics.median(other), 0.0)
        if sampled:
            rows.add("_sampled", 1e6 * statistics.fmean(sampled), 0.0)


def session_in_place(watched, batches, rounds: int, rows: Rows) -> None:
    """`Session.after_step`, then in other rounds its parts, timed inside the watched steps
    (each timer costs about a microsecond of its row: two reads of each clock)."""
    adapter, session = watched.adapter, watched.adapter.session
    groups = [
        [(session, "after_step", "session.after_step")],
        [
            (adapter, "step_records", "- the step's records (`step_records`)"),
            (session._detectors, "observe", "- the detectors (`DetectorSuite.observe`)"),
            (session.series, "observe", "- the run's series (`RunSeries.observe`)"),
        ],
    ]
    steps = 2 * adapter.stats.schedule.period  # whole periods: as many sampled steps a round
    for index in range(2 * rounds):
        timed: dict[str, list[tuple[float, float]]] = {}
        group = groups[index % 2]
        for owner, attribute, name in group:
            setattr(owner, attribute, _timer(getattr(owner, attribute), timed.setdefault(name, [])))
        try:
            for n in range(steps):
                watched(*batches[n % len(batches)])
        finally:
            for owner, attribute, _ in group:
                delattr(owner, attribute)
        for name, calls in timed.items():
            cpu, wall = sum(c for c, _ in calls) / steps, sum(w for _, w in calls) / steps
            rows.add(f"{name}, per step (sampled steps' burst included)", 1e6 * cpu, 1e6 * wall)
        if index % 2 == 0:
            calls = timed["session.after_step"]
            rows.add(
                "session.after_step, median step (its loss and gradient norm only)",
                1e6 * statistics.median(c for c, _ in calls),
                1e6 * statistics.median(w for _, w in calls),
            )


def _timer(function: Callable, calls: list[tuple[float, float]]) -> Callable:
    """`function`, noting the CPU and wall time of each call in `calls`."""

    def timed(*args, **kwargs):
        c0, w0 = _clocks()
        result = function(*args, **kwargs)
        c1, w1 = _clocks()
        calls.append((c1 - c0, w1 - w0))
        return result

    return timed


def pieces_alone(watched, batches, rounds: int, rows: Rows) -> None:
    """Each piece of the per-update path in batches of `CALLS` calls, interleaved by round."""
    model, optimizer = watched.model, watched.optimizer
    x, y = batches[0]
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()  # the gradients present, as when an update is asked for
    _, grads = dense_gradients(optimizer)
    losses = [loss]
    guard = StepGuard([optimizer])  # not installed: its own check and bookkeeping only
    tiny = torch.nn.Parameter(torch.ones(2))

    def tiny_backward() -> None:
        (tiny * 2.0).sum().backward()

    def in_roots() -> None:
        with backward_roots():
            tiny_backward()

    def guarded() -> None:
        guard.begin_call()
        guard._step(optimizer, _no_update)

    with torch.no_grad():
        norms = torch._foreach_norm(grads)
    read = torch.stack([*norms, loss]).tolist()
    pieces: dict[str, Callable[[], object]] = {
        "rng state (`rng_state.save`)": rng_state.save,
        "a tiny backward (baseline of the next row)": tiny_backward,
        "the same inside `backward_roots()`": in_roots,
        "parameters and gradients (`dense_gradients`)": lambda: dense_gradients(optimizer),
        "the guard, no update, no loss (`StepGuard._step`, its check included)": guarded,
        "check (`step_check.check`)": lambda: check(losses, grads),
        "- `torch._foreach_norm`": lambda: torch._foreach_norm(grads),
        "- one `torch.stack` of the norms and the loss, `tolist()`": lambda: torch.stack(
            [*norms, loss]
        ).tolist(),
        "- the global norm on the host (`_root_of_squares`)": lambda: _root_of_squares(read[:-1]),
    }
    tiny_steps = _tiny_steps()
    for index in range(rounds):
        names = list(pieces) if index % 2 == 0 else list(pieces)[::-1]
        for name in names:
            piece = pieces[name]
            c0, w0 = _clocks()
            for _ in range(CALLS):
                piece()
            c1, w1 = _clocks()
            rows.add(name, 1e6 * (c1 - c0) / CALLS, 1e6 * (w1 - w0) / CALLS)
        for setup in ("plain", "watched") if index % 2 == 0 else ("watched", "plain"):
            c0, w0 = _clocks()
            for _ in range(CALLS):
                tiny_steps[setup]()
            c1, w1 = _clocks()
            rows.add(f"_tiny {setup}", 1e6 * (c1 - c0) / CALLS, 1e6 * (w1 - w0) / CALLS)


def _no_update():
    return None


def _tiny_steps() -> dict[str, Callable[[], object]]:
    """A step of a two-parameter model (SGD), plain and watched, warmed up."""
    steps = {}
    for setup in ("plain", "watched"):
        weight = torch.nn.Parameter(torch.ones(2))
        optimizer = torch.optim.SGD([weight], lr=1e-3)
        data = torch.ones(2)

        def step(weight=weight, optimizer=optimizer, data=data):
            optimizer.zero_grad()
            loss = (weight * data).sum()
            loss.backward()
            optimizer.step()

        if setup == "watched":
            step = gradient_doctor.torch.watch(step, optimizer=optimizer, verbose=False)
        for _ in range(SETTLE_STEPS):
            step()
        steps[setup] = step
    return steps


def measure(rounds: int) -> tuple[Rows, int]:
    """All the rows, and the sampling period the watched run settled on."""
    torch.set_num_threads(1)
    steps, batches = _setups()
    for n in range(SETTLE_STEPS):
        for setup in steps:
            _run(steps, setup, batches[n % len(batches)])
    rows = Rows()
    whole_steps(steps, batches, rounds, rows)
    session_in_place(steps["watched"], batches, rounds, rows)
    pieces_alone(steps["watched"], batches, rounds, rows)
    return rows, steps["watched"].adapter.stats.schedule.period


def table(rows: Rows, period: int) -> list[str]:
    """The rows as a Markdown table, in microseconds and in percent of a plain step."""
    plain = _quartiles(rows.cpu["plain step"])[0]

    def line(name: str, cpu: list[float], wall: list[float] | None) -> str:
        c, c1, c3 = _quartiles(cpu)
        cells = [name, f"{c:.1f} [{c1:.1f}, {c3:.1f}]"]
        if wall is None:
            cells.append("")
        else:
            w, w1, w3 = _quartiles(wall)
            cells.append(f"{w:.1f} [{w1:.1f}, {w3:.1f}]")
        cells.append(f"{100 * c / plain:.1f}%")
        return "| " + " | ".join(cells) + " |"

    def difference(first: str, second: str) -> list[float]:
        return [a - b for a, b in zip(rows.cpu[first], rows.cpu[second])]

    lines = [
        "| piece | CPU us [IQR] | wall us [IQR] | CPU, % of a plain step |",
        "|---|---:|---:|---:|",
    ]
    for name in ("plain step", "watched step"):
        lines.append(line(name, rows.cpu[name], rows.wall[name]))
    lines.append(
        line(
            "all that watching adds (watched - plain)",
            difference("watched step", "plain step"),
            None,
        )
    )
    for piece in WITHOUT:
        cost = difference("watched step", f"without {piece} step")
        lines.append(line(f"- {piece} (watched - watched without it)", cost, None))
    if "_sampled" in rows.cpu:
        extra = [s - o for s, o in zip(rows.cpu["_sampled"], rows.cpu["_other"])]
        lines.append(line(f"a sampled step's extra, one step in {period}", extra, None))
    for name in rows.cpu:
        if name.startswith("session.after_step") or name.startswith("- the"):
            lines.append(line(name, rows.cpu[name], rows.wall[name]))
    tiny = difference("_tiny watched", "_tiny plain")
    lines.append(line("watching a 2-parameter model's step (watched - plain)", tiny, None))
    for name in rows.cpu:
        if name.startswith(("_", "session.after_step", "- the", "plain", "watched", "without")):
            continue
        if name == "the same inside `backward_roots()`":
            roots = difference(name, "a tiny backward (baseline of the next row)")
            lines.append(line("`backward_roots()` (the row above subtracted)", roots, None))
            continue
        lines.append(line(name, rows.cpu[name], rows.wall[name]))
    return lines


def section(rows: Rows, period: int, rounds: int, seconds: float) -> str:
    """The page's subsection: what was run, how, the table."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join(
        [
            HEADING,
            "",
            f"Generated by `benchmarks/torch_step_pieces.py` ({now}; {rounds} rounds, "
            f"{seconds:.0f} s; torch {torch.__version__}, torch threads: "
            f"{torch.get_num_threads()}; {platform.machine()}, {os.cpu_count()} logical "
            f"cores; gradient_doctor {gradient_doctor.__version__}). "
            f"{WORKLOADS[0].name}, Adam, every setup its own model with the same initial "
            f"weights, after {SETTLE_STEPS} steps of each (the doctor's warm-up over, its "
            f"sampling period settled at one step in {period}). In the step: {rounds} "
            f"rounds, each {BLOCKS} blocks of {BLOCK} steps of every setup, the setups' "
            "order rotating from block to block (the machine's speed swings within "
            "seconds); a round's value is a setup's mean step over its "
            f"{BLOCKS * BLOCK} steps, sampled steps included. A piece's row is what "
            "the watched step loses without it, per round, on the benchmark's own watcher: "
            "the check answering a constant of the same shape (all after it runs as "
            "before), the detectors and the run's series never fed, no step sampled, the "
            "random state not copied. Switched off, a piece can take others' work with it "
            "(no sampled step leaves the detectors no per-module gradient norms either), "
            "so the rows need not add up to the whole. The session's rows are timed "
            "inside the watched steps, per step over two whole sampling periods a round "
            "(so with the sampled steps' burst: every step's per-module gradient norms "
            "since the last sample, read and fed to the detectors); its median step hands "
            "over its loss and gradient norm alone, fed to the detectors every "
            "`FEED_EVERY` steps. Then each piece alone, "
            f"{CALLS} calls in a row a round, on the benchmark's own model and optimizer, "
            "gradients present (rows starting with `-` are parts of the one above); and "
            "a 2-parameter model's step, watched and plain: all that watching adds around "
            "an update that costs nothing. Alone, a piece's state stays in the caches; in "
            "the step, the training between two calls evicts it, so it costs more there. "
            "CPU time is the process's; a row is the median over the rounds "
            "[interquartile range].",
            "",
            *table(rows, period),
            "",
        ]
    )


def _write(path: str, text: str) -> None:
    """Put the subsection in place at the end of the PyTorch section (after its table)."""
    with open(path, encoding="utf-8") as page:
        content = page.read()
    if PIECES_SECTION not in content:
        start = content.find(SECTION)
        end = content.find("\n## ", start + len(SECTION)) if start >= 0 else -1
        if end >= 0:
            content = content[:end] + "\n\n" + text.rstrip("\n") + "\n" + content[end:]
            with open(path, "w", encoding="utf-8") as page:
                page.write(content)
            return
    write_section(path, PIECES_SECTION, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--output", help="write the pieces' subsection of this Markdown page")
    options = parser.parse_args(argv)
    rounds = 3 if options.quick else options.rounds
    started = time.perf_counter()
    rows, period = measure(rounds)
    text = section(rows, period, rounds, time.perf_counter() - started)
    print(text)
    if options.output:
        _write(options.output, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
