"""The watched step: runs the user's call under the guard and hands the session its reading."""

from __future__ import annotations

import functools
from collections.abc import Callable

from gradient_doctor.core.pipeline import StepReading
from gradient_doctor.errors import TrainingStopped
from gradient_doctor.torch_adapter.adapter import FailedCall, TorchAdapter
from gradient_doctor.torch_adapter.hooks.backward_roots import backward_roots
from gradient_doctor.torch_adapter.step import rng_state


class WatchedStep:
    """The user's step function, watched: call it as the original.

    Each call keeps the random generators' state from before it (for a replay with
    the same dropout masks and noise), collects the losses `backward()` is called on,
    and lets the guarded optimizers check each update. A call that asked for no
    update is not a training step and is not counted.

    Args:
        function: the user's step (forward, `loss.backward()`, `optimizer.step()`).
        adapter: the run's `TorchAdapter`, its guard installed.
    """

    def __init__(self, function: Callable, adapter: TorchAdapter) -> None:
        functools.update_wrapper(self, function)
        self.function = function
        self.adapter = adapter

    @property
    def session(self):
        """The run's `Session` (its problems, warnings and `report()`)."""
        return self.adapter.session

    def report(self, script: str | None = None):
        """The run's report so far (`framework` "torch")."""
        return self.adapter.report(script)

    def __call__(self, *args, **kwargs):
        adapter, guard = self.adapter, self.adapter.guard
        if guard.recorder is not None:  # called from inside a replay
            return self.function(*args, **kwargs)
        adapter.session.before_step()
        rng = rng_state.save()
        guard.begin_call()
        adapter.begin_call()
        try:
            with backward_roots():
                result = self.function(*args, **kwargs)
        except BaseException:
            adapter.stats.forget_step()
            raise
        if not guard.checks:  # no update: not a step (an evaluation), nothing sampled
            adapter.stats.forget_step()
            return result
        cuts = guard.cuts.take()
        if cuts:  # parameters left without a gradient: where their paths break
            adapter.disconnected(FailedCall(self.function, args, kwargs, rng), cuts)
        loss, grad_norm = guard.call_loss_and_norm()
        reading = StepReading(
            failed=guard.closed,
            loss=loss,
            grad_norm=grad_norm,
            skipped=guard.skipped,
            updates=guard.updates,
            zero_streak=adapter.zero_streak(grad_norm, guard.closed),
        )
        if reading.failed:
            adapter.stats.forget_step()
        overflow = next((c.squares_overflow for c in guard.checks if c.squares_overflow), None)
        replay = FailedCall(self.function, args, kwargs, rng, overflow) if reading.failed else None
        finding = adapter.session.after_step(reading, replay)
        if finding is not None and adapter.session.stop_on_problem:
            raise TrainingStopped(finding)
        return result
