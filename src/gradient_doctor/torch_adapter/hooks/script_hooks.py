"""Every optimizer update of a script, checked before it runs and skipped when not finite.

`gradient-doctor run` cannot wrap a step function: the user's loop may be anywhere (a
module-level loop, a method, gradient accumulation, a GAN's two optimizers). What every
loop has in common is `optimizer.step()`, and torch calls the global optimizer step
hooks around each one. Before each update, one fused check (`step_check.check`) reads
that optimizer's gradients and the last loss `backward()` was called on; when anything
is not finite, the gradients are hidden from the optimizer for that update (each
`.grad` set to None, which every torch optimizer skips) and put back after it, so the
weights and the optimizer's state stay those of the last good step and the user's
code is untouched. A healthy update is only read, never written: training computes
exactly what it computes unwatched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from gradient_doctor.torch_adapter.step.step_check import (
    Check,
    check,
    dense_parameters,
    parameters_with_grads,
)


@dataclass
class Update:
    """One call of `optimizer.step()` as the hooks saw it.

    Attributes:
        index: 0-based count of the updates of the run, over every optimizer.
        optimizer: the optimizer that stepped.
        check: what the check read, or None for a step with a closure (LBFGS: its
            loss is computed inside the step, so it is not checked).
        present: how many dense gradients the update was about to apply (0 with a
            closure): a change tells the owner to look for parameters left without one.
        hidden: the gradients hidden from the optimizer while a non-finite update
            ran, `(parameter, gradient)`, put back after it.
        parameters: the parameters whose gradients were checked, in the check's order.
    """

    index: int
    optimizer: torch.optim.Optimizer
    check: Check | None
    present: int = 0
    hidden: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    parameters: list[torch.Tensor] = field(default_factory=list)

    @property
    def skipped(self) -> bool:
        """The update was not applied: its loss or gradients were not finite."""
        return self.check is not None and not self.check.finite


class UpdateListener:
    """What the hooks tell their owner; both methods do nothing by default."""

    def before_update(self, index: int, optimizer: torch.optim.Optimizer) -> None:
        """Called before update `index` is checked (the doctor's own ops follow)."""

    def after_update(self, update: Update) -> None:
        """Called after the update ran (or was skipped), its gradients put back."""


class UpdateHooks:
    """The global optimizer step hooks and the note of the last `backward()` root.

    Args:
        listener: told of each update (`UpdateListener`).
    """

    def __init__(self, listener: UpdateListener) -> None:
        self.listener = listener
        self.updates = 0  # updates seen so far, over every optimizer
        self.last_root: torch.Tensor | None = None
        self._current: Update | None = None
        self._handles: list = []
        self._backward: Callable | None = None

    def install(self) -> None:
        """Register the hooks and note the roots of `torch.autograd.backward` (which
        `Tensor.backward` calls) from now on."""
        if self._handles:
            return
        self._handles = [
            register_optimizer_step_pre_hook(self._pre_hook),
            register_optimizer_step_post_hook(self._post_hook),
        ]
        backward = self._backward = torch.autograd.backward

        @functools.wraps(backward)
        def noting_backward(tensors, *args, **kwargs):
            if isinstance(tensors, torch.Tensor):
                self.last_root = tensors
            elif tensors:
                self.last_root = next(
                    (t for t in reversed(tuple(tensors)) if isinstance(t, torch.Tensor)), None
                )
            return backward(tensors, *args, **kwargs)

        torch.autograd.backward = noting_backward

    def uninstall(self) -> None:
        """Remove the hooks and give `torch.autograd.backward` back."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._backward is not None:
            torch.autograd.backward, self._backward = self._backward, None
        self.last_root = None

    def _pre_hook(self, optimizer, args, kwargs) -> None:
        index = self.updates
        self.updates += 1
        self.listener.before_update(index, optimizer)
        if len(args) > 1 or kwargs:  # a closure recomputes the loss inside the step
            self._current = Update(index, optimizer, None)
            return
        params = dense_parameters(optimizer)
        grads = [p.grad for p in params]
        root, self.last_root = self.last_root, None
        result = check([root] if root is not None else [], grads)
        update = self._current = Update(index, optimizer, result, len(grads), parameters=params)
        if not result.finite:
            update.hidden = [(p, p.grad) for p in parameters_with_grads(optimizer)]
            for parameter, _ in update.hidden:
                parameter.grad = None

    def _post_hook(self, optimizer, args, kwargs) -> None:
        update, self._current = self._current, None
        if update is None or update.optimizer is not optimizer:
            return
        for parameter, grad in update.hidden:
            parameter.grad = grad
        self.listener.after_update(update)
