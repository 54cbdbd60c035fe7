"""Try a finding's fixes through the adapter's trial runner: where each starts, its baseline.

A fix that rewrites the op's line is tried from the last good state; a remedy that
acts on the updates from a saved state from before the trouble began, and one that
acts from the start from the first saved state (`core/trial_start.py`). The unchanged
step is run from each start too (the baseline), and a fix counts only where its
baseline failed (`core/fix_trials.py` judges). How a remedy is put in place and how
the step runs again is the adapter's (`FixTrials`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from collections.abc import Callable

from gradient_doctor.core.evidence import Evidence, StepHistory
from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.fix_trials import TrialOutcome, judge
from gradient_doctor.core.pipeline.adapter import FixTrials
from gradient_doctor.core.trial_start import trial_start, trouble_began

# Steps each trial runs past the failing step unless told otherwise.
DEFAULT_TRIAL_STEPS = 200

_TOO_LONG = (
    "this remedy acts from the start of training, and the run failed too far from it to "
    "run it all again here; `gradient-doctor fix` reruns the patched script"
)


def try_fixes(
    finding: Finding,
    evidence: Evidence,
    trials: FixTrials,
    steps: int = DEFAULT_TRIAL_STEPS,
    first_warning: int | None = None,
    announce: Callable[[int, int, int | None], None] | None = None,
) -> Finding:
    """The finding with its fixes (and not-fixes) tried, each from the state it needs.

    A trial from step S runs through the failing step and `steps` steps beyond.
    Returns `finding` unchanged when the adapter has nothing to try, or when the
    trials themselves fail (they are extra evidence: never the end of the user's run).

    Args:
        finding: the diagnosed problem, its fixes placed.
        evidence: its evidence (the history says where the trouble began).
        trials: what the adapter can try of it.
        steps: int, steps past the failing step each trial runs.
        first_warning: the step of the run's first early warning, if any.
        announce: told `(count, steps, failing step)` before the trials run.
    """
    plans = list(trials.plans)
    if not plans:
        return finding
    if trials.untried is not None:
        reason = trials.untried
        untried = [TrialOutcome(p.remedy, p.setting, steps, 0, None, skipped=reason) for p in plans]
        return judge(finding, TrialOutcome(None, "", steps, 0, None, skipped=reason), untried)
    failing = finding.step or 0
    saved = sorted({failing, *trials.saved_steps})
    began = trouble_began(evidence.history, failing, first_warning)
    starts = {plan.remedy: trial_start(plan.remedy, finding, began, saved) for plan in plans}
    reference = _loss_before(evidence.history, began, failing)
    if announce is not None:
        announce(len(plans), steps, finding.step)
    try:
        with trials.open() as runner:
            baselines: dict[int | None, TrialOutcome] = {}
            outcomes, done = [], {}
            for plan in plans:
                start = starts[plan.remedy]
                if start is None:
                    outcomes.append(
                        TrialOutcome(plan.remedy, plan.setting, steps, 0, None, skipped=_TOO_LONG)
                    )
                    continue
                key = None if start.step == failing else start.step
                if key not in baselines:
                    baselines[key] = runner.run(None, start, failing, steps)
                outcome = done.get((plan.replacement, key)) or runner.run(
                    plan, start, failing, steps
                )
                if plan.replacement is not None:
                    done[(plan.replacement, key)] = outcome
                outcome, finding = _stronger_if_failed(
                    finding,
                    plan.remedy,
                    outcome,
                    trials,
                    lambda p, s=start: runner.run(p, s, failing, steps),
                    reference,
                )
                outcomes.append(dataclasses.replace(outcome, remedy=plan.remedy))
    except Exception as error:
        warnings.warn(
            f"gradient-doctor could not try the fixes ({type(error).__name__}: {error}); "
            "they are reported untried.",
            stacklevel=2,
        )
        return finding
    if not baselines:
        baselines[None] = TrialOutcome(None, "", steps, 0, None, skipped=_TOO_LONG)
    return judge(finding, baselines, outcomes, reference)


def _stronger_if_failed(
    finding: Finding,
    remedy: str,
    outcome: TrialOutcome,
    trials: FixTrials,
    run: Callable[[object], TrialOutcome],
    reference: float | None = None,
) -> tuple[TrialOutcome, Finding]:
    """When `remedy`'s trial failed, or held without going on learning (a tenth of a
    rate that still diverged, 8.3 -> 19.4), and its fix has a `stronger` one (the
    learning rate lowered a decade further), try that from the same start, and so on;
    the first that holds, learning (`reference`: the loss before the trouble), stands
    in for the fix in the finding, its evidence saying what failed first.
    Returns the outcome to judge and the finding (changed only when a stronger held)."""
    fix = _fix_of(finding, remedy)
    tried = [outcome]
    while _short(outcome, reference) and fix is not None and fix.stronger is not None:
        fix = fix.stronger
        plan = trials.plan_for(remedy, fix)
        if plan is None:
            break
        stronger = run(plan)
        tried.append(stronger)
        if not _short(stronger, reference):
            failed = "; ".join(f"{o.setting} {_how_short(o, reference)}" for o in tried[:-1])
            held = dataclasses.replace(stronger, setting=f"{stronger.setting}, where {failed}")
            return held, _with_fix(finding, remedy, fix)
        outcome = stronger
    return tried[0], finding


def _short(outcome: TrialOutcome, reference: float | None) -> bool:
    """A trial that ran and failed, or held without going on learning."""
    if outcome.skipped is not None:
        return False
    return outcome.failed_at is not None or outcome.shortfall(reference) is not None


def _how_short(outcome: TrialOutcome, reference: float | None) -> str:
    """ "had failed at trial step 3", or "had held, but the loss diverged (8.3 -> 19)"."""
    if outcome.failed_at is not None:
        return f"had failed at trial step {outcome.failed_at + 1}"
    return f"had held, but {outcome.shortfall(reference)}"


def _fix_of(finding: Finding, remedy: str) -> Fix | None:
    """The fix that `remedy` is tried as: a fix of that family, or a not-fix's patch."""
    for fix in finding.fixes:
        if fix.family == remedy:
            return fix
    return next((n.fix for n in finding.not_fixes if n.remedy == remedy), None)


def _with_fix(finding: Finding, remedy: str, fix: Fix) -> Finding:
    """`finding` with `fix` in place of the one `remedy` was tried as."""
    fixes = tuple(fix if f.family == remedy else f for f in finding.fixes)
    not_fixes = tuple(
        dataclasses.replace(n, fix=fix) if n.remedy == remedy and n.fix is not None else n
        for n in finding.not_fixes
    )
    return dataclasses.replace(finding, fixes=fixes, not_fixes=not_fixes)


def _loss_before(history: StepHistory, began: int, failing: int) -> float | None:
    """The median loss of the recorded steps before the trouble began; when the history
    kept none that early (a slow build-up warned of long before), of the recorded steps
    before the failing one; None when there are none (a failure at the first step)."""
    for before in (began, failing):
        losses = sorted(
            loss
            for step, loss in zip(history.steps, history.losses)
            if step < before and loss is not None and math.isfinite(loss)
        )
        if losses:
            return losses[len(losses) // 2]
    return None


def announce_trials(count: int, steps: int, step: int | None, knob: str = "trial_steps=N") -> None:
    """Say on stderr that trials are starting (each runs to `steps` steps past `step`),
    and how to change their length: `knob`, the argument of the API that started them
    (`gradient-doctor run` says its option, "--trial-steps N")."""
    print(
        f"gradient-doctor: step {step} is not finite; trying {count} remedies, each from a "
        f"saved good state through step {step} and {steps} steps beyond ({knob} "
        "to change, 0 to skip)",
        file=sys.stderr,
        flush=True,
    )
