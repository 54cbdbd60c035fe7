"""What each PyTorch fix trial puts in place: the patch as written, or the setting it writes.

A patch of the user's functions runs from the patched copy of their file (the core's
`patched_functions`: the live functions get the patched code, so the eager step runs
it as written). A patch of the optimizer's construction or of its `step()` line
(`torch_optimizer`) is tried by the setting it writes (`Fix.trial_setting`): every
param group's learning rate times the patch's scale (a stronger rung's too), or
`torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` of each optimizer's
parameters at the patch's bound, between `backward()` and its `step()`, as the
inserted line does. The same remedies without a patch (`watch()` saw no line that
built the optimizer) are tried, for the evidence, at what their patch would write:
a tenth of the rate, the median healthy gradient norm. A scheduler the user steps
inside the trial sets the rate again from the one it was built with, as it would
with the patch: only the rates the trial's updates use are scaled.
Each plan is a context manager factory the trial runner holds open while it runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.fix_placement import CLIP_VALUE, clipping_threshold
from gradient_doctor.core.patched_source import patched_functions
from gradient_doctor.core.trial_plans import (
    LEARNING_RATE_DIVISOR,
    TrialPlan,
    not_possible,
    patch_plan,
    remedies_of,
)

# The remedies tried by a setting: the setting's name in a patch's `trial_setting`,
# and what the trial uses without a patch (what the patch would write).
_SETTINGS = {
    "lower_learning_rate": ("learning_rate_scale", lambda evidence: 1 / LEARNING_RATE_DIVISOR),
    "gradient_clipping": ("clip_grad_norm", lambda evidence: clipping_threshold(evidence.history)),
    "clip_by_value": ("clip_grad_value", lambda evidence: CLIP_VALUE),
}


def trial_plans(
    finding: Finding, evidence: Evidence, optimizers: Sequence[torch.optim.Optimizer]
) -> list[TrialPlan]:
    """The remedies of `finding` (fixes and not-fixes) that can be tried, in its order.

    A fix with a patch of the user's functions is tried as the patch is written; a
    lower learning rate and gradient clipping as the setting their patch writes, or
    would write. Other remedies are left out (the judge reports them untried).
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
    if remedy in _SETTINGS:
        name, default = _SETTINGS[remedy]
        setting = fix.trial_setting if fix is not None else None
        value = float(setting[1]) if setting is not None and setting[0] == name else None
        value = default(evidence) if value is None else value
        if remedy == "lower_learning_rate":
            return _lower_learning_rate(optimizers, value)
        if remedy == "gradient_clipping":
            return _clipped(remedy, optimizers, torch.nn.utils.clip_grad_norm_, value)
        return _clipped(remedy, optimizers, torch.nn.utils.clip_grad_value_, value)
    if fix is not None and fix.patch and fix.trial_setting is None:
        return patch_plan(remedy, fix, patched_functions)
    return None


def _lower_learning_rate(optimizers: Sequence[torch.optim.Optimizer], scale: float) -> TrialPlan:
    """Every param group's learning rate multiplied by `scale`, put back at the end."""
    groups = [group for optimizer in optimizers for group in optimizer.param_groups]
    rates = [group.get("lr") for group in groups]
    if not groups or not all(isinstance(rate, float | int) for rate in rates):
        return TrialPlan("lower_learning_rate", "", not_possible("no float learning rate"))
    shown = ", ".join(f"{rate * scale:.4g} (was {rate:.4g})" for rate in rates)

    @contextmanager
    def apply() -> Iterator[None]:
        for group, rate in zip(groups, rates):
            group["lr"] = rate * scale
        try:
            yield
        finally:  # as it was, for the next plan made (a stronger one reads it)
            for group, rate in zip(groups, rates):
                group["lr"] = rate

    return TrialPlan("lower_learning_rate", f"learning rate {shown}", apply)


def _clipped(
    remedy: str, optimizers: Sequence[torch.optim.Optimizer], clip, bound: float
) -> TrialPlan:
    """`clip(parameters, bound)` (`clip_grad_norm_` or `clip_grad_value_`) before each
    optimizer's (guarded) step, as the line a patch inserts before `step()` does."""

    @contextmanager
    def apply() -> Iterator[None]:
        wrapped = []
        for optimizer in optimizers:
            step = optimizer.step
            parameters = [p for group in optimizer.param_groups for p in group["params"]]

            def clipped_step(*args, _step=step, _parameters=parameters, **kwargs):
                clip(_parameters, bound)
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

    keyword = "max_norm" if clip is torch.nn.utils.clip_grad_norm_ else "clip_value"
    return TrialPlan(remedy, f"{clip.__name__}(..., {keyword}={bound:.4g})", apply)
