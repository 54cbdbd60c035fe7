"""What each PyTorch fix trial puts in place: the patch as written, or the setting it would write.

A patch of the user's functions runs from the patched copy of their file (the core's
`patched_functions`: the live functions get the patched code, so the eager step runs
it as written). Two remedies on the updates are tried without a patch, for the
evidence (they cannot be marked verified): a lower learning rate, set on every param
group of the optimizers, and gradient clipping, `torch.nn.utils.clip_grad_norm_` of
each optimizer's parameters between `backward()` and its `step()`, as a user writes it.
Each plan is a context manager factory the trial runner holds open while it runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.fix_placement import clipping_threshold
from gradient_doctor.core.patched_source import patched_functions
from gradient_doctor.core.trial_plans import (
    LEARNING_RATE_DIVISOR,
    TrialPlan,
    not_possible,
    patch_plan,
    remedies_of,
)


def trial_plans(
    finding: Finding, evidence: Evidence, optimizers: Sequence[torch.optim.Optimizer]
) -> list[TrialPlan]:
    """The remedies of `finding` (fixes and not-fixes) that can be tried, in its order.

    A fix with a patch of the user's functions is tried as the patch is written; a
    lower learning rate and gradient clipping as the setting they name, with or
    without a patch. Other remedies are left out (the judge reports them untried).
    """
    plans = (plan_for(remedy, fix, evidence, optimizers) for remedy, fix in remedies_of(finding))
    return [plan for plan in plans if plan is not None]


def plan_for(
    remedy: str,
    fix: Fix | None,
    evidence: Evidence,
    optimizers: Sequence[torch.optim.Optimizer],
) -> TrialPlan | None:
    """The plan that tries `remedy` as `fix` writes it (see `trial_plans`), or None."""
    if remedy == "lower_learning_rate":
        return _lower_learning_rate(optimizers)
    if remedy == "gradient_clipping":
        return _clipped(optimizers, clipping_threshold(evidence.history))
    if fix is not None and fix.patch and fix.trial_setting is None:
        return patch_plan(remedy, fix, patched_functions)
    return None


def _lower_learning_rate(optimizers: Sequence[torch.optim.Optimizer]) -> TrialPlan:
    """Every param group's learning rate divided by `LEARNING_RATE_DIVISOR`."""
    groups = [group for optimizer in optimizers for group in optimizer.param_groups]
    rates = [group.get("lr") for group in groups]
    if not groups or not all(isinstance(rate, float | int) for rate in rates):
        return TrialPlan("lower_learning_rate", "", not_possible("no float learning rate"))
    shown = ", ".join(f"{rate / LEARNING_RATE_DIVISOR:.4g} (was {rate:.4g})" for rate in rates)

    @contextmanager
    def apply() -> Iterator[None]:
        for group, rate in zip(groups, rates):
            group["lr"] = rate / LEARNING_RATE_DIVISOR
        try:
            yield
        finally:
            for group, rate in zip(groups, rates):
                group["lr"] = rate

    return TrialPlan("lower_learning_rate", f"learning rate {shown}", apply)


def _clipped(optimizers: Sequence[torch.optim.Optimizer], max_norm: float) -> TrialPlan:
    """`clip_grad_norm_(parameters, max_norm)` before each optimizer's (guarded) step."""

    @contextmanager
    def apply() -> Iterator[None]:
        wrapped = []
        for optimizer in optimizers:
            step = optimizer.step
            parameters = [p for group in optimizer.param_groups for p in group["params"]]

            def clipped_step(*args, _step=step, _parameters=parameters, **kwargs):
                torch.nn.utils.clip_grad_norm_(_parameters, max_norm)
                return _step(*args, **kwargs)

            had_own = "step" in vars(optimizer)
            wrapped.append((optimizer, step, had_own))
            optimizer.step = clipped_step
        try:
            yield
        finally:
            for optimizer, step, had_own in reversed(wrapped):
                if had_own:
                    optimizer.step = step
                else:
                    del optimizer.step

    return TrialPlan("gradient_clipping", f"clip_grad_norm_(..., max_norm={max_norm:.4g})", apply)
