"""Judge fix trials: did training go on finite, and learning, with the remedy in place?

A trial starts from the last good state (the weights before the failing step) and
runs the step again for a number of steps with one remedy applied. The unchanged
step is run the same way first (the baseline): a remedy only counts as verified
when the unchanged step fails again within the trial and the remedied one does not.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gradient_doctor.core.findings import Finding, Fix, NotFix
from gradient_doctor.core.trial_start import UPDATE_REMEDIES

# The loss of a held trial may rise by at most this fraction of its size (first tenth to
# last tenth of the trial) and still count as training going on: adversarial losses
# wander, a diverging loss at least doubles.
LOSS_RISE_ALLOWED = 1.0


@dataclass(frozen=True)
class TrialOutcome:
    """What happened when the step was run again with one remedy (or none).

    Attributes:
        remedy: the fix family tried (`FIX_FAMILIES`), or None for the baseline.
        setting: what was changed, in words (e.g. "global_clipnorm=0.41").
        steps_planned: how many steps the trial was to run.
        steps_run: how many it ran (fewer when a step failed).
        failed_at: the 0-based trial step whose loss or gradients were not finite,
            or None when every step was finite.
        losses: the loss of each finite step, in order.
        batches: which batches the trial ran on, in words.
        skipped: why the remedy could not be tried, or None when it ran.
        start: the step the trial started from (None: the failing step).
        start_reason: why it started there, in words ("" when it is the failing step).
    """

    remedy: str | None
    setting: str
    steps_planned: int
    steps_run: int
    failed_at: int | None
    losses: tuple[float, ...] = ()
    batches: str = "the failing batch"
    skipped: str | None = None
    start: int | None = None
    start_reason: str = ""

    @property
    def held(self) -> bool:
        """True when the trial ran all its steps, finite."""
        return self.skipped is None and self.failed_at is None and self.steps_run > 0

    def loss_trend(self) -> tuple[float, float] | None:
        """Mean loss over the first and the last tenth of the trial, or None."""
        finite = [v for v in self.losses if math.isfinite(v)]
        if len(finite) < 2:
            return None
        window = max(1, len(finite) // 10)
        return sum(finite[:window]) / window, sum(finite[-window:]) / window

    def learning(self, reference: float | None = None) -> bool:
        """True when the loss did not blow up over the trial (losses may be negative),
        and ended no worse than `reference` (the loss before the trouble) allows."""
        trend = self.loss_trend()
        if trend is None:
            return True
        first, last = trend
        if last - first > LOSS_RISE_ALLOWED * max(abs(first), 1e-12):
            return False
        if reference is None or not math.isfinite(reference):
            return True
        return last - reference <= LOSS_RISE_ALLOWED * max(abs(reference), 1e-12)


def describe(outcome: TrialOutcome, start_step: int | None, phase: str | None = None) -> str:
    """One sentence of evidence: what was run, from where, and what happened.

    `start_step` is the failing step, used when the outcome says no start of its own.
    """
    if outcome.skipped is not None:
        return f"not tried: {outcome.skipped}"
    start_step = outcome.start if outcome.start is not None else start_step
    origin = "" if start_step is None else f" from the state before step {start_step}"
    if outcome.start_reason:
        origin += f" ({outcome.start_reason})"
    setting = f" with {outcome.setting}" if outcome.setting else ""
    if outcome.failed_at is not None:
        text = (
            f"tried{setting}{origin} on {outcome.batches}: the loss or gradients were "
            f"not finite again at trial step {outcome.failed_at + 1} of "
            f"{outcome.steps_planned}"
        )
        if outcome.failed_at == 0 and phase == "forward" and outcome.remedy in UPDATE_REMEDIES:
            text += (
                " (its forward pass ran on the saved weights, which this remedy changes "
                "only from the first update on)"
            )
        return text
    trend = outcome.loss_trend()
    loss = ""
    if trend is not None:
        direction = "falling" if trend[1] < trend[0] else "not falling"
        loss = f"; loss {trend[0]:.4g} -> {trend[1]:.4g} ({direction})"
    return (
        f"tried{setting}{origin} on {outcome.batches}: all {outcome.steps_run} steps finite{loss}"
    )


def judge(
    finding: Finding,
    baselines: TrialOutcome | Mapping[int | None, TrialOutcome],
    outcomes: Sequence[TrialOutcome],
    reference_loss: float | None = None,
) -> Finding:
    """The finding with each tried fix marked verified or not, with its evidence.

    A fix is `verified: true` when its patch was trialed and every step ran finite
    with the loss not blowing up (and ending no worse than `reference_loss`, the loss
    before the trouble, allows), and the unchanged step, run from the same start,
    failed again (so the trial can tell); false when it failed too; null, with the
    reason, when the trial could not tell or the fix has no patch to prove.
    Not-fixes that were tried get their evidence as well.

    Args:
        finding: the diagnosed problem.
        baselines: the unchanged step's trial, or one per start step (the key is
            an outcome's `start`).
        outcomes: one trial per remedy tried.
        reference_loss: the loss before the trouble began, or None.
    """
    start = finding.step
    if isinstance(baselines, TrialOutcome):
        baselines = {baselines.start: baselines}
    by_remedy = {o.remedy: o for o in outcomes}
    phase = finding.phase
    drift = finding.category in _DRIFTS

    def baseline_of(outcome: TrialOutcome | None) -> TrialOutcome:
        key = None if outcome is None else outcome.start
        return baselines.get(key) or next(iter(baselines.values()))

    fixes = tuple(
        _judged_fix(
            fix,
            (outcome := by_remedy.get(fix.family)),
            baseline_of(outcome),
            start,
            phase,
            reference_loss,
            drift,
        )
        for fix in finding.fixes
    )
    not_fixes, promoted = [], []
    for item in finding.not_fixes:
        outcome = by_remedy.get(item.remedy)
        baseline = baseline_of(outcome)
        if _helped(outcome, baseline, reference_loss):
            # The trial says it helps after all: it is a fix, with the trial's verdict.
            fix = item.fix or Fix(item.remedy, f"Try {item.remedy.replace('_', ' ')}", "")
            promoted.append(
                _judged_fix(fix, outcome, baseline, start, phase, reference_loss, drift)
            )
        else:
            not_fixes.append(_judged_not_fix(item, outcome, start, phase))
    judged = dataclasses.replace(finding, fixes=fixes + tuple(promoted), not_fixes=tuple(not_fixes))
    return ranked(judged)


def ranked(finding: Finding) -> Finding:
    """The finding with its verified fixes first, then the untried, then those that failed.

    Within each group the rules' order stands: the fix that removes the cause (the op
    rewritten, the data standardised) before the one that works around it.
    """
    order = {True: 0, None: 1, False: 2}
    fixes = sorted(finding.fixes, key=lambda fix: order[fix.verified])
    return dataclasses.replace(finding, fixes=tuple(fixes))


def _helped(
    outcome: TrialOutcome | None, baseline: TrialOutcome, reference_loss: float | None
) -> bool:
    """True when a trial held, learning, where the unchanged step failed again."""
    return (
        outcome is not None
        and outcome.held
        and outcome.learning(reference_loss)
        and baseline.failed_at is not None
    )


def _baseline_note(baseline: TrialOutcome, start: int | None) -> str:
    if baseline.failed_at is not None:
        return f"unchanged, it failed again at trial step {baseline.failed_at + 1}"
    return f"unchanged, it also stayed finite for {baseline.steps_run} steps"


def _judged_fix(
    fix: Fix,
    outcome: TrialOutcome | None,
    baseline: TrialOutcome,
    start: int | None,
    phase: str | None,
    reference_loss: float | None,
    drift: bool = False,
) -> Fix:
    """The fix with its trial's verdict. `drift`: the failure is a value that built up
    in the forward pass (a remedy on the updates then slows it, and may only delay it)."""
    if outcome is None:
        return fix
    base_note = _baseline_note(baseline, start)
    evidence = describe(outcome, start, phase)
    if outcome.skipped is not None:
        return dataclasses.replace(fix, verified=None, evidence=evidence)
    if outcome.held and baseline.failed_at is None:
        verified = None  # the unchanged step held as well: the trial cannot tell
        evidence += f" ({base_note}, so this trial cannot tell)"
    elif outcome.held and outcome.learning(reference_loss) and not fix.patch:
        verified = None  # what held was the remedy, not a patch the user can apply
        evidence += f" ({base_note}); no patch of your file could be written for it"
    else:
        verified = outcome.held and outcome.learning(reference_loss)
        evidence += f" ({base_note})"
        if outcome.held and not outcome.learning():
            evidence += "; but the loss diverged, so training did not go on well"
        elif outcome.held and not verified:
            evidence += (
                f"; but the loss ended worse than the {reference_loss:.4g} it had before "
                "the trouble began"
            )
        elif verified and drift and _slows_a_build_up(fix.family, outcome, start):
            evidence += (
                f"; it acts on the updates, and the trouble built up from step "
                f"{outcome.start} to {start}: it may only delay the failure past this window"
            )
    return dataclasses.replace(fix, verified=verified, evidence=evidence)


# Failures of a value that drifts over training to a limit (not gradients that explode).
_DRIFTS = frozenset({"forward_overflow", "forward_domain"})


def _slows_a_build_up(family: str, outcome: TrialOutcome, failing: int | None) -> bool:
    """True for a remedy on the updates tried from well before the failing step."""
    started = outcome.start
    return (
        family in UPDATE_REMEDIES
        and started is not None
        and failing is not None
        and failing - started > 1
    )


def _judged_not_fix(
    item: NotFix, outcome: TrialOutcome | None, start: int | None, phase: str | None
) -> NotFix:
    """The not-fix with its trial's evidence; an expectation nobody tried says so."""
    if outcome is None or outcome.skipped is not None:
        if item.structural or item.evidence:
            return item
        reason = f": {outcome.skipped}" if outcome is not None else ""
        return dataclasses.replace(item, evidence=f"not tried{reason}")
    return dataclasses.replace(item, evidence=describe(outcome, start, phase))
