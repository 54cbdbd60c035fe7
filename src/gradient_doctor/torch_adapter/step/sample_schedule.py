"""Which PyTorch steps the per-module statistics sample: one in ten, then as a time budget allows.

A sampled step costs more than another (module hooks and a `TorchFunctionMode` on its
forward, a copy of the parameters around its update, one host read): about 1.5 ms on a
CPU whatever the model's size, which is 60% of a 2.5 ms MLP step but 10% of a 15 ms
transformer block's. One step in ten (`LAYER_STATS_EVERY`, as TensorFlow's) would put
6% on the short step's mean for this alone. So after the first `WARMUP_STEPS` (sampled
one in ten, where the early trouble is), the period is the shortest of 10, 20, 40, ... 320
steps over which the sampled steps' extra time stays within `BUDGET` of the run's own
step time, measured on the run itself (wall time between the ends of consecutive
steps, medians over recent steps). A period changes only at a sampled step; every
read still sees the per-step gradient norms of all the steps since the last one.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable

from gradient_doctor.core.records import LAYER_STATS_EVERY

WARMUP_STEPS = 200
BUDGET = 0.01
# The periods a schedule may take, in multiples of its base period.
_MULTIPLES = (1, 2, 4, 8, 16, 32)
# Steps whose times the medians are taken over.
_PLAIN_STEPS = 20
_SAMPLED_STEPS = 3


class SampleSchedule:
    """The sampled steps of one run.

    Args:
        every: int, the base period (and the period during the warm-up).
        budget: float, the sampled steps' extra time allowed, as a fraction of the step
            time, after the warm-up.
        warmup: int, the steps sampled at the base period whatever they cost.
        clock: returns seconds; `time.perf_counter` unless a test drives it.
    """

    def __init__(
        self,
        every: int = LAYER_STATS_EVERY,
        budget: float = BUDGET,
        warmup: int = WARMUP_STEPS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.periods = tuple(every * multiple for multiple in _MULTIPLES)
        self.period = every
        self._budget = budget
        self._warmup = warmup
        self._clock = clock
        self._plain: deque[float] = deque(maxlen=_PLAIN_STEPS)
        self._sampled: deque[float] = deque(maxlen=_SAMPLED_STEPS)
        self._last_end: float | None = None

    @classmethod
    def fixed(cls, every: int) -> SampleSchedule:
        """A schedule that samples every `every` steps throughout (no budget)."""
        schedule = cls(every=every, warmup=0)
        schedule.periods = (every,)
        return schedule

    def samples(self, step: int) -> bool:
        """Whether `step` is a sampled step."""
        return step % self.period == 0

    def step_ended(self, step: int) -> None:
        """Step `step` ended (its statistics read when it was sampled): note its time,
        and after a sampled step past the warm-up, fit the period to the budget."""
        now = self._clock()
        sampled = self.samples(step)
        if self._last_end is not None:
            (self._sampled if sampled else self._plain).append(now - self._last_end)
        self._last_end = now
        if sampled and step >= self._warmup and self._sampled and len(self._plain) >= 5:
            self.period = self._fitting()

    def interrupted(self) -> None:
        """A step failed or the run paused: the next interval is no step's time."""
        self._last_end = None

    def _fitting(self) -> int:
        """The shortest period whose sampled steps' extra time stays within the budget
        (the longest when none does)."""
        plain = statistics.median(self._plain)
        extra = statistics.median(self._sampled) - plain
        for period in self.periods:
            if extra <= self._budget * plain * period:
                return period
        return self.periods[-1]
