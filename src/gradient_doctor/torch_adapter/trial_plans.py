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

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.fix_placement import clipping_threshold
from gradient_doctor.core.patched_source import NotPatchable, patched_functions
from gradient_doctor.core.patches import PatchError

# A trial's learning rate is the user's divided by this (what a patch would write).
LEARNING_RATE_DIVISOR = 10.0


class NotTried(Exception):
    """A remedy that cannot be put in place here (the reason is its message)."""


@dataclass(frozen=True)
class TrialPlan:
    """One remedy to try: its family, what it changes, and how to put it in place.

    `apply` is a context manager factory holding the remedy in place while the trial
    runs; for a patch it yields the `PatchedSource`, whose `met` says whether the
    patched code ran. `replacement` is the patch's text (None for other remedies);
    two families with the same patch are run once.
    """

    remedy: str
    setting: str
    apply: Callable[[], contextlib.AbstractContextManager]
    replacement: object = None


def trial_plans(
    finding: Finding, evidence: Evidence, optimizers: Sequence[torch.optim.Optimizer]
) -> list[TrialPlan]:
    """The remedies of `finding` (fixes and not-fixes) that can be tried, in its order.

    A fix with a patch of the user's functions is tried as the patch is written; a
    lower learning rate and gradient clipping as the setting they name, with or
    without a patch. Other remedies are left out (the judge reports them untried).
    """
    fixes: dict[str, Fix] = {fix.family: fix for fix in finding.fixes}
    fixes.update({n.remedy: n.fix for n in finding.not_fixes if n.fix is not None})
    remedies = [fix.family for fix in finding.fixes] + [n.remedy for n in finding.not_fixes]
    plans = []
    for remedy in dict.fromkeys(remedies):
        fix = fixes.get(remedy)
        if remedy == "lower_learning_rate":
            plans.append(_lower_learning_rate(optimizers))
        elif remedy == "gradient_clipping":
            plans.append(_clipped(optimizers, clipping_threshold(evidence.history)))
        elif fix is not None and fix.patch and fix.trial_setting is None:
            files = ", ".join(sorted({edit.file for edit in fix.edits}))
            plans.append(
                TrialPlan(
                    remedy,
                    f"the patch of {files}",
                    lambda edits=fix.edits: _patched(edits),
                    replacement=fix.patch,
                )
            )
    return plans


@contextmanager
def _patched(edits) -> Iterator[object]:
    """The patch in place, or `NotTried` saying why it cannot be run again in-process."""
    try:
        with patched_functions(edits) as placed:
            yield placed
    except (NotPatchable, PatchError) as reason:
        raise NotTried(str(reason)) from None


def _lower_learning_rate(optimizers: Sequence[torch.optim.Optimizer]) -> TrialPlan:
    """Every param group's learning rate divided by `LEARNING_RATE_DIVISOR`."""
    groups = [group for optimizer in optimizers for group in optimizer.param_groups]
    rates = [group.get("lr") for group in groups]
    if not groups or not all(isinstance(rate, float | int) for rate in rates):
        return TrialPlan("lower_learning_rate", "", _not_possible("no float learning rate"))
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


def _not_possible(reason: str) -> Callable[[], contextlib.AbstractContextManager]:
    @contextmanager
    def apply() -> Iterator[None]:
        raise NotTried(reason)
        yield  # pragma: no cover

    return apply
