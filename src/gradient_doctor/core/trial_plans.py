"""A fix trial's plan, framework-neutral: the remedy, what it changes, how it goes in place.

Each adapter says how its remedies are put in place (a patched copy of the user's
functions, an optimizer setting, standardised data); what a plan is, which remedies
of a finding are planned and in what order, and how a patch is planned are the same
for every framework, so they live here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.patched_source import NotPatchable
from gradient_doctor.core.patches import PatchError

# A trial's learning rate is the user's divided by this (what its patch writes).
LEARNING_RATE_DIVISOR = 10.0


class NotTried(Exception):
    """A remedy that cannot be put in place here (the reason is its message)."""


@dataclass(frozen=True)
class TrialPlan:
    """One remedy to try: its family, what it changes, and how to put it in place.

    `apply` is a context manager factory that holds the remedy in place while the
    trial runs (raising `NotTried` when it cannot); for a patch it yields the patched
    source, so a patch whose code the trial never reached is reported as not tried.
    `replacement` is the patch's text (None for other remedies): two families with
    the same patch are run once. `batches`, when set, makes fresh iterators over the
    data as the remedy changes it; the trial runs on those alone.
    """

    remedy: str
    setting: str
    apply: Callable[[], AbstractContextManager]
    replacement: object = None
    batches: Callable[[], Iterator] | None = None


def remedies_of(finding: Finding) -> list[tuple[str, Fix | None]]:
    """The finding's remedies, fixes first then not-fixes, each once, with its fix (a
    not-fix's shadow patch, when it has one; else None)."""
    fixes = {fix.family: fix for fix in finding.fixes}
    fixes.update({n.remedy: n.fix for n in finding.not_fixes if n.fix is not None})
    remedies = [fix.family for fix in finding.fixes] + [n.remedy for n in finding.not_fixes]
    return [(remedy, fixes.get(remedy)) for remedy in dict.fromkeys(remedies)]


def patch_plan(
    remedy: str, fix: Fix, patched_functions: Callable[..., AbstractContextManager]
) -> TrialPlan:
    """The plan that runs the user's functions from the patched copy of their file, as
    the patch is written (`patched_functions(edits)` is the adapter's way of doing it)."""
    files = ", ".join(sorted({edit.file for edit in fix.edits}))

    @contextmanager
    def apply() -> Iterator[object]:
        try:
            with patched_functions(fix.edits) as placed:
                yield placed
        except (NotPatchable, PatchError) as reason:
            raise NotTried(str(reason)) from None

    return TrialPlan(remedy, f"the patch of {files}", apply, replacement=fix.patch)


def not_possible(reason: str) -> Callable[[], AbstractContextManager]:
    """An `apply` that says why the remedy cannot be put in place (`NotTried`)."""

    @contextmanager
    def apply() -> Iterator[None]:
        raise NotTried(reason)
        yield  # pragma: no cover: a generator, for contextmanager

    return apply
