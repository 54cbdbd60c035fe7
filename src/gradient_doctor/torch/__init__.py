"""gradient-doctor for PyTorch: `watch` a training step; its non-finite updates are skipped
and diagnosed (the op, its module, your line, the cause and the fix). `ops` holds safe
drop-ins with finite gradients at their singular points (`gradient_doctor.torch.ops`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gradient_doctor.core.pipeline import DEFAULT_TRIAL_STEPS
from gradient_doctor.render.terminal import render_finding, render_warning
from gradient_doctor.torch import ops
from gradient_doctor.torch_adapter.adapter import TorchAdapter
from gradient_doctor.torch_adapter.hooks.watched_step import WatchedStep

__all__ = ["WatchedStep", "ops", "watch"]

# The names users know the accepted types by.
_PUBLIC_NAMES = {torch.optim.Optimizer: "torch.optim.Optimizer", torch.nn.Module: "torch.nn.Module"}


def watch(
    step: Callable | None = None,
    *,
    optimizer,
    model=None,
    stop_on_problem: bool = True,
    verbose: bool = True,
    trial_steps: int = DEFAULT_TRIAL_STEPS,
):
    """Watch a PyTorch training step: the call that runs forward, `loss.backward()` and
    `optimizer.step()`.

    Each update is checked first (the loss and the gradients, one fused check) and
    skipped when anything is not finite, so the weights and the optimizer's state stay
    those of the last good step. The failing call is then replayed from there, with
    the same random draws, op by op, and diagnosed.

    Args:
        step: the step function. Omit it to use `watch` as a decorator.
        optimizer: a `torch.optim.Optimizer`, or a list of them (a GAN's two).
        model: the `torch.nn.Module` trained, or a list of them: ops are named by
            their module's path in it. Defaults to None (modules named by class).
        stop_on_problem: bool. Raise `TrainingStopped` at the first problem; False
            records it and goes on. Defaults to True.
        verbose: bool. Print each diagnosis and early warning on stderr when it is
            made. Defaults to True.
        trial_steps: int. Steps each fix trial runs from the last good state, the
            failing call first, on the failing batch; 0 turns fix trials off.
            Defaults to 200.

    Returns:
        The watched step (call it like the original; `.report()` gives the run's
        report), or a decorator.

    Raises:
        TypeError: `optimizer` is not a torch optimizer, or `model` not a module.

    Example:
        >>> train_step = gradient_doctor.torch.watch(train_step, model=model, optimizer=opt)
        >>> for x, y in loader:
        ...     train_step(x, y)
    """
    optimizers = _listed(
        optimizer, torch.optim.Optimizer, "optimizer", "that applies the step's updates"
    )
    models = (
        _listed(model, torch.nn.Module, "model", "the step trains") if model is not None else []
    )
    adapter = TorchAdapter(
        optimizers,
        models,
        stop_on_problem=stop_on_problem,
        on_finding=render_finding if verbose else None,
        on_warning=render_warning if verbose else None,
        trial_steps=trial_steps,
    )
    adapter.install()

    def wrap(function: Callable) -> WatchedStep:
        return WatchedStep(function, adapter)

    return wrap if step is None else wrap(step)


def _listed(value, kind: type, argument: str, role: str) -> list:
    """`value` as a list of `kind`, or a `TypeError` naming the argument."""
    values = list(value) if isinstance(value, list | tuple) else [value]
    for candidate in values:
        if not isinstance(candidate, kind):
            raise TypeError(
                f"`{argument}` must be a `{_PUBLIC_NAMES[kind]}` (or a list of them), the one "
                f"{role}. Received: {argument}={candidate!r}"
            )
    return values
