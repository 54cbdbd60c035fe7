"""An optimizer's `step`, guarded: the update runs only when its losses and gradients are finite."""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator, Sequence

import torch

from gradient_doctor.torch_adapter.hooks import backward_roots
from gradient_doctor.torch_adapter.localize.gradient_paths import CutWatch
from gradient_doctor.torch_adapter.localize.op_recorder import OpRecorder
from gradient_doctor.torch_adapter.step.module_stats import ModuleStats
from gradient_doctor.torch_adapter.step.step_check import (
    Check,
    check,
    combined,
    dense_gradients,
    keeps_squares,
)

# The instance attribute a guarded optimizer's own `step` is kept under.
_UNGUARDED = "_gradient_doctor_unguarded_step"


class StepGuard:
    """The update decision of the watched optimizers, and what it read in the current call.

    Each guarded `optimizer.step()` checks the gradients it is about to apply and the
    losses `backward()` was called on since the last update (`step_check.check`). A
    non-finite check closes the guard: that update and every later one are skipped
    (weights and optimizer state stay at the last good step) until `resume()`. While
    a step is replayed, updates are never applied: the check's non-finite tensors are
    handed to the recorder instead, and each update's losses kept (`replayed`). Each
    update's gradients are counted for `cuts`, which notes parameters left without one.

    Args:
        optimizers: the `torch.optim.Optimizer`s whose `step` is guarded.
        stats: the per-module statistics told of each applied update, or None.
        on_applied: called with the optimizer and its parameters after each update
            applied, or None.
    """

    def __init__(
        self,
        optimizers: Sequence[torch.optim.Optimizer],
        stats: ModuleStats | None = None,
        on_applied: Callable[[torch.optim.Optimizer, list[torch.Tensor]], None] | None = None,
    ) -> None:
        self.optimizers = tuple(optimizers)
        self.stats = stats
        self._on_applied = on_applied
        self.closed = False
        self.skipped = 0  # updates skipped since training last went on
        self.updates = 0  # updates asked for over that time
        self.checks: list[Check] = []  # those of the current call
        self.recorder: OpRecorder | None = None
        self.replayed: list[tuple[torch.optim.Optimizer, tuple[torch.Tensor, ...]]] = []
        self.cuts = CutWatch()  # parameters left without a gradient

    def install(self) -> None:
        """Guard each optimizer's `step` (an instance attribute over the class's method)."""
        for optimizer in self.optimizers:
            if _UNGUARDED in vars(optimizer):
                raise ValueError(
                    "This optimizer is already watched by gradient-doctor. Received: "
                    f"optimizer={type(optimizer).__name__}; watch each optimizer once."
                )
            unguarded = optimizer.step
            setattr(optimizer, _UNGUARDED, unguarded)
            optimizer.step = types.MethodType(self._guarded(unguarded), optimizer)

    def uninstall(self) -> None:
        """Give each optimizer its own `step` back."""
        for optimizer in self.optimizers:
            unguarded = vars(optimizer).pop(_UNGUARDED, None)
            if unguarded is not None:
                optimizer.step = unguarded

    def begin_call(self) -> None:
        """Forget the checks of the previous call."""
        self.checks.clear()

    def resume(self) -> None:
        """Let updates through again (training goes on after a problem)."""
        self.closed, self.skipped, self.updates = False, 0, 0

    @contextlib.contextmanager
    def replaying(self, recorder: OpRecorder) -> Iterator[None]:
        """While the block runs, updates are suppressed and their bad tensors recorded."""
        self.recorder, self.replayed = recorder, []
        try:
            yield
        finally:
            self.recorder = None

    def _guarded(self, unguarded):
        """The guarded `step`, a function of the optimizer like the method it replaces (an
        LR scheduler made later wraps it as it wraps `Optimizer.step`)."""

        @functools.wraps(unguarded)
        def step(optimizer, *args, **kwargs):
            return self._step(optimizer, unguarded, *args, **kwargs)

        return step

    def _step(self, optimizer, unguarded, *args, **kwargs):
        """The guarded `optimizer.step(...)`."""
        if args or kwargs:  # a closure recomputes the loss inside the step: not checked
            return unguarded(*args, **kwargs)
        params, grads = dense_gradients(optimizer)
        losses = backward_roots.take()
        if self.recorder is not None:
            self.recorder.mark_bad([*losses, *grads])
            self.replayed.append((optimizer, tuple(losses)))
            return None
        self.cuts.observe(optimizer, len(grads))
        self.updates += 1
        stats = self.stats
        if stats is not None:
            stats.forwards_done()
        result = check(losses, grads, keeps_squares(optimizer))
        self.checks.append(result)
        self.closed = self.closed or not result.finite
        if self.closed:
            self.skipped += 1
            return None
        if stats is None:
            applied = unguarded()
        else:
            stats.note_grads(params, result.norms)
            stats.update_start(optimizer)
            applied = unguarded()
            stats.update_end(optimizer)
        if self._on_applied is not None:
            self._on_applied(optimizer, params)
        return applied

    def call_loss_and_norm(self) -> tuple[float | None, float | None]:
        """The current call's last checked loss, and the global gradient norm over its
        updates (`combined`)."""
        return combined(self.checks)

    @property
    def call_loss(self) -> float | None:
        """The current call's last checked loss."""
        return combined(self.checks)[0]
