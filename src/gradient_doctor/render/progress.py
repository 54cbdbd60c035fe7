"""The progress line: step, loss and the worst headroom, on stderr every few seconds."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import TextIO

from gradient_doctor.core.knowledge.wording import approximately, format_number
from gradient_doctor.core.records import HeadroomSample, StepRecord
from gradient_doctor.core.run_series import HEADROOM_MEASURES, headroom_place

DEFAULT_INTERVAL = 30.0
PREFIX = "gradient-doctor progress:"


def used_fraction(sample: HeadroomSample) -> float:
    """How much of a risky op's range its input has used: 0 far from the limit, 1 at it.

    For a limit other than 0 (exp's 88.72, acos's 1) this is 1 - gap / |limit|. A
    domain edge at 0 (log, division) has no scale to measure a distance against (a
    probability of 1e-30 is harmless), so it counts as 0 until the edge is reached, 1 after.

    Args:
        sample: HeadroomSample.

    Returns:
        float, above 1 when the limit was passed.
    """
    if sample.limit == 0:
        return 1.0 if sample.gap <= 0 else 0.0
    return 1.0 - sample.gap / abs(sample.limit)


def worst_headroom(samples: Iterable[HeadroomSample]) -> HeadroomSample | None:
    """The sample closest to its limit (largest `used_fraction`), or None when none."""
    return max(samples, key=used_fraction, default=None)


def progress_text(step: int, loss: float | None, worst: HeadroomSample | None) -> str:
    """Write the progress line.

    Args:
        step: int, the latest watched step.
        loss: float or None, its loss.
        worst: HeadroomSample or None, the risky op closest to its limit.

    Returns:
        E.g. "gradient-doctor progress: step 1200, loss 0.0123, closest to a limit: Exp
        in layer `mp` (train.py:42), largest input 83.5 of 88.72 (94%)".
    """
    parts = [f"{PREFIX} step {step}"]
    if loss is not None:
        parts.append(f"loss {format_number(loss)}")
    if worst is not None:
        used = f" ({approximately(100 * used_fraction(worst))}%)" if worst.limit else ""
        parts.append(
            f"closest to a limit: {headroom_place(worst)}, {HEADROOM_MEASURES[worst.kind]} "
            f"{format_number(worst.value)} of {format_number(worst.limit)}{used}"
        )
    return ", ".join(parts)


class ProgressLine:
    """Prints `progress_text` for the latest step at most once per `interval` seconds.

    Fed the records of watched steps (`Watcher(on_record=...)`). Each print is one
    whole line on its own (no carriage return, no cursor movement), so the script's
    own output is never overwritten or hidden. The first line comes `interval`
    seconds after the start: a short run prints none.

    Args:
        interval: float, the least seconds between two lines (above 0).
        stream: where to write. Defaults to `sys.stderr` at the time of printing.
        clock: returns the time in seconds. Defaults to `time.monotonic`.

    Raises:
        ValueError: for an `interval` that is not a positive number.
    """

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
            raise ValueError(
                f"`interval` must be a number of seconds above 0. Received: interval={interval!r}"
            )
        self._interval = float(interval)
        self._stream = stream
        self._clock = clock
        self._next = clock() + self._interval
        self._step: int | None = None
        self._loss: float | None = None
        self._headroom: dict[str, HeadroomSample] = {}

    def __call__(self, record: StepRecord) -> None:
        """Take one step's record; print the line when `interval` has passed since the last."""
        if self._step is None or record.step >= self._step:
            self._step = record.step
            if record.loss is not None:
                self._loss = record.loss
        for sample in record.headroom:
            self._headroom[sample.key] = sample
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self._interval
        stream = self._stream or sys.stderr
        text = progress_text(self._step, self._loss, worst_headroom(self._headroom.values()))
        print(text, file=stream, flush=True)
