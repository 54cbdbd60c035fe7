"""Confirm each verified fix of a finished run: its patch, applied to a copy, trains healthy.

The trials inside the run prove a patch from a saved state, on the batches the run
kept; the run's later batches were never seen. When the run was short enough to run
again, each verified patch is applied to a copy of the user's folder and the copy
trains from the start past the failing step (`patched_rerun`). A patch whose copy
fails is not verified, whatever its trial said, and its evidence says what the
copy found.
"""

from __future__ import annotations

import dataclasses
import sys

from gradient_doctor.cli.patched_rerun import relative_script, rerun_patched, untried_patch
from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.fix_trials import ranked
from gradient_doctor.core.report import Report

# Runs that took longer than this (wall seconds) are not run again for every fix.
CONFIRM_MAX_SECONDS = 120.0
# At most this many verified fixes of one problem are run again.
MAX_CONFIRMED = 4


def confirm_fixes(
    report: Report,
    script: str,
    args: list[str],
    run_seconds: float,
    mode: str = "auto",
    steps_past: int = 200,
) -> Report:
    """`report` with every verified fix run again as a patched copy, and judged by it.

    Args:
        report: the run's report.
        script: the script as the user named it.
        args: its arguments.
        run_seconds: how long the run took (a rerun takes about as long).
        mode: "auto" (confirm when the run took at most `CONFIRM_MAX_SECONDS`),
            "always" or "never".
        steps_past: how many steps past the failing step the copy must run healthy
            (a fix that only stalls training shows within that window).
    """
    relative = relative_script(script)
    if mode == "never" or relative is None or not report.problems:
        return report
    if mode == "auto" and run_seconds > CONFIRM_MAX_SECONDS:
        return _unconfirmed(report, run_seconds)
    timeout = max(3 * run_seconds, 60.0)
    problems = tuple(
        _confirmed(problem, relative, args, timeout, steps_past) for problem in report.problems
    )
    return dataclasses.replace(report, problems=problems)


def _confirmed(
    problem: Finding, script: str, args: list[str], timeout: float, steps_past: int
) -> Finding:
    """Each verified patch rerun from the start; and each patch no trial inside the run
    could try (module-level code, say), rerun too, against the unchanged copy rerun
    the same way (it must fail again, or the rerun cannot tell). Once a rerun was stopped
    from writing the user's files, the rest are not run: each would write the same."""
    if problem.worker is not None:  # one worker of a cluster cannot train again alone
        return problem
    step = problem.step or 0
    fixes, done, baseline, stopped = [], 0, None, None
    for fix in problem.fixes:
        untried = untried_patch(fix.verified, fix.evidence)
        if fix.patch and (fix.verified is True or untried) and done < MAX_CONFIRMED:
            done += 1
            if untried and baseline is None and stopped is None:
                _say("the unchanged script: running a copy of your folder from the start")
                baseline = rerun_patched(script, args, None, step, steps_past, timeout)
                _say(f"the unchanged script: {baseline.why}")
                stopped = baseline if baseline.blocked else None
            rerun = stopped
            if rerun is None:
                _say(f"{fix.family}: running a patched copy of your folder from the start")
                rerun = rerun_patched(script, args, fix.patch, step, steps_past, timeout)
                _say(f"{fix.family}: {rerun.why}")
                stopped = rerun if rerun.blocked else None
            if rerun.blocked:
                fix = _not_confirmed(fix, rerun.why, untried)
            elif untried:
                fix = _rerun_only(fix, rerun.held, rerun.why, baseline)
            else:
                fix = _judged(fix, rerun.held, rerun.why)
        fixes.append(fix)
    return ranked(dataclasses.replace(problem, fixes=tuple(fixes)))


def _not_confirmed(fix: Fix, why: str, untried: bool) -> Fix:
    """A fix whose rerun was stopped from writing the user's files: its verdict stays as
    the run gave it (a stopped rerun proves nothing either way), and it says why."""
    if untried:
        return dataclasses.replace(fix, evidence=f"not confirmed: {why}{_untried_note(fix)}")
    return dataclasses.replace(fix, evidence=f"{fix.evidence}; not confirmed: {why}")


def _untried_note(fix: Fix) -> str:
    """Why no trial inside the run tried `fix`, in brackets, from its evidence."""
    untried = (
        fix.evidence.removeprefix("not tried: ").removeprefix("not tried") if fix.evidence else ""
    )
    return f" (not tried inside the run: {untried})" if untried else " (not tried inside the run)"


def _rerun_only(fix: Fix, held: bool, why: str, baseline) -> Fix:
    """A patch no trial ran, judged by its rerun against the unchanged copy's; the
    evidence leads with what the reruns showed, then why no trial inside the run tried it."""
    inside = _untried_note(fix)
    if baseline.held:
        note = f"{why}, but {baseline.why} too, so the rerun cannot tell"
        return dataclasses.replace(fix, evidence=note + inside)
    if held:
        note = f"confirmed: {why}, where {baseline.why}"
        return dataclasses.replace(fix, verified=True, evidence=note + inside)
    return dataclasses.replace(fix, verified=False, evidence=f"applied, {why}{inside}")


def _judged(fix: Fix, held: bool, why: str) -> Fix:
    if held:
        return dataclasses.replace(fix, evidence=f"{fix.evidence}; confirmed: {why}")
    return dataclasses.replace(
        fix, verified=False, evidence=f"{fix.evidence}; but applied, it did not hold: {why}"
    )


def _unconfirmed(report: Report, run_seconds: float) -> Report:
    """Say, on each verified fix, that only the trial inside the run proved it."""
    note = (
        f"; not rerun from the start (the run took {run_seconds:.0f} s): "
        "`gradient-doctor fix` reruns the patched script"
    )
    problems = tuple(
        dataclasses.replace(
            problem,
            fixes=tuple(
                dataclasses.replace(fix, evidence=f"{fix.evidence}{note}")
                if fix.verified is True and fix.patch
                else fix
                for fix in problem.fixes
            ),
        )
        for problem in report.problems
    )
    return dataclasses.replace(report, problems=problems)


def _say(text: str) -> None:
    print(f"gradient-doctor: confirming {text}", file=sys.stderr, flush=True)
