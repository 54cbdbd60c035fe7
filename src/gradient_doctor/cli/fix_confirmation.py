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
from collections.abc import Callable, Collection, Mapping, Sequence

from gradient_doctor.cli.patched_rerun import (
    LEARNING_FAILURES,
    Rerun,
    loss_points,
    relative_script,
    rerun_patched,
    untried_patch,
)
from gradient_doctor.core.findings import Finding, Fix, NotFix
from gradient_doctor.core.fix_trials import (
    BEHIND_RANKED,
    DRIFTS,
    RESCALES_THE_LOSS,
    SLOWS_ONLY,
    clamp_caveat,
    ranked,
)
from gradient_doctor.core.report import Report
from gradient_doctor.core.trial_start import UPDATE_REMEDIES
from gradient_doctor.render.json_report import series_to_dict

# Runs that took longer than this (wall seconds) are not run again for every fix.
CONFIRM_MAX_SECONDS = 120.0
# At most this many verified fixes of one problem are run again.
MAX_CONFIRMED = 4
# For a value that built up over training, the remedies whose copy runs to the script's
# end (within the time), not 200 steps past the failure: those that leave the op that
# failed as it was, or act on the updates, may only have slowed the drift (a lower rate
# that held 200 steps past step 9 met the failure again at step 245 of 300).
MAY_ONLY_DELAY = frozenset(SLOWS_ONLY) | UPDATE_REMEDIES
# Failures that may build up over training, which such a remedy may only delay: a value
# drifting to a limit, and gradients growing step after step (a regression on a time
# feature that keeps growing, in time order: its rate lowered 10x held 200 steps past
# step 148, then exploded at step 413 of 700).
BUILDS_UP = DRIFTS | {"exploding_gradients"}


def runs_to_the_end(category: str, family: str) -> bool:
    """Whether a patched copy of remedy `family` for a problem of `category` must run to
    the script's end (within the time), not only `steps_past` steps past the failure."""
    return category in BUILDS_UP and family in MAY_ONLY_DELAY


def confirmation_pending(mode: str, trial_steps: int) -> str | None:
    """What a finding printed during the run says under its fixes when reruns will judge
    them after it (`confirm_fixes`): its verdicts are those of the trials inside the run,
    which a rerun may still overturn; None when no rerun will come."""
    if mode == "never" or trial_steps <= 0:
        return None
    when = "" if mode == "always" else f" (when the run took at most {CONFIRM_MAX_SECONDS:.0f} s)"
    return (
        "verdicts from inside the run: after the script, each patch is applied to a copy "
        f"of your folder and run again from the start{when}, which may overturn them"
    )


def confirm_fixes(
    report: Report,
    script: str,
    args: list[str],
    run_seconds: float,
    mode: str = "auto",
    steps_past: int = 200,
    stopped: Callable[[], bool] = lambda: False,
    listing: frozenset[str] | None = None,
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
        stopped: says when a signal asked the run to end: no rerun starts after it.
        listing: the folder's contents before the run (`scratch_copy.folder_listing`):
            a copy leaves out what the run made, and starts where the run started.
    """
    relative = relative_script(script)
    if mode == "never" or relative is None or not report.problems:
        return report
    if mode == "auto" and run_seconds > CONFIRM_MAX_SECONDS:
        return _unconfirmed(report, run_seconds)
    timeout = max(3 * run_seconds, 60.0)
    reference = loss_points(series_to_dict(series) for series in report.series)
    problems = tuple(
        _confirmed(problem, relative, args, timeout, steps_past, stopped, reference, listing)
        for problem in report.problems
    )
    return dataclasses.replace(report, problems=problems)


def _confirmed(
    problem: Finding,
    script: str,
    args: list[str],
    timeout: float,
    steps_past: int,
    stopped: Callable[[], bool],
    reference: Sequence[tuple[int, float]] = (),
    listing: frozenset[str] | None = None,
) -> Finding:
    """Each verified patch rerun from the start (its loss held against the original's,
    `reference`, before the original failed); and each patch no trial inside the run
    could try (module-level code, say), rerun too, against the unchanged copy rerun
    the same way (it must fail again, or the rerun cannot tell). Then, while reruns are
    left, each remedy said not to help on an expectation no trial bore out, whose patch
    exists: rerun the same way, it is borne out, or it becomes a fix if it held."""
    if problem.worker is not None:  # one worker of a cluster cannot train again alone
        return problem
    reruns = _Reruns(script, args, problem.step or 0, steps_past, timeout, stopped, reference)
    reruns.listing = listing
    reruns.learn_more = problem.category in LEARNING_FAILURES
    if problem.disconnected is not None:
        reruns.disconnected = frozenset(problem.disconnected.variables)
    fixes = []
    held: dict[int, Rerun] = {}  # index in `fixes` -> the rerun that confirmed it
    for fix in problem.fixes:
        untried = untried_patch(fix.verified, fix.evidence)
        # A clamp that held its trial as a rewritten computation: its copy can still
        # show it failing (then it is no fix at all); held, it stays unverified.
        clamped = fix.verified is None and fix.clamped_share is not None and not untried
        if fix.patch and (fix.verified is True or untried or clamped) and reruns.left:
            to_end = runs_to_the_end(problem.category, fix.family)
            rerun, baseline = reruns.run(fix.family, fix.patch, untried, to_end)
            gentler = None
            if untried:
                fix, rerun, baseline, gentler = _stronger_if_failed(
                    fix, rerun, baseline, reruns, to_end
                )
            if not rerun.judged:
                fix = _not_confirmed(fix, rerun.why, untried)
            elif untried and not baseline.judged:
                fix = _not_confirmed(fix, baseline.why, untried)
            elif untried:
                fix = _rerun_only(fix, rerun.held, rerun.why, baseline)
                fix = _may_only_delay(fix, problem, rerun)
            elif clamped and rerun.held:
                fix = dataclasses.replace(fix, evidence=f"{fix.evidence}; its copy held too")
            else:
                fix = _may_only_delay(_judged(fix, rerun.held, rerun.why), problem, rerun)
            if gentler:
                fix = dataclasses.replace(fix, evidence=f"{fix.evidence}; {gentler}")
            if fix.verified is True and rerun.held and fix.family not in RESCALES_THE_LOSS:
                held[len(fixes)] = rerun
        fixes.append(fix)
    not_fixes = []
    for item in problem.not_fixes:
        patch = item.fix.patch if item.fix is not None else None
        if patch and _expected_only(item) and reruns.left:
            to_end = runs_to_the_end(problem.category, item.remedy)
            rerun, baseline = reruns.run(item.remedy, patch, untried=True, to_end=to_end)
            fix = dataclasses.replace(item.fix, evidence=item.evidence)
            told = rerun.judged and baseline.judged
            judged = _rerun_only(fix, rerun.held, rerun.why, baseline) if told else fix
            if judged.verified is True:  # it helps after all: a fix, proved by the rerun
                if item.remedy not in RESCALES_THE_LOSS:
                    held[len(fixes)] = rerun
                fixes.append(_may_only_delay(judged, problem, rerun, item.why))
                continue
            if rerun.crashed:  # the patch as written fails: no word on the remedy
                why = f"{rerun.why}: its patch failed, not the remedy, so this rerun cannot tell"
                item = dataclasses.replace(item, evidence=why)
            else:
                item = dataclasses.replace(item, evidence=judged.evidence or item.evidence)
                item = _borne_out(item, rerun, baseline)
        not_fixes.append(item)
    fixes, behind = _behind_the_best(fixes, held)
    problem = ranked(dataclasses.replace(problem, fixes=tuple(fixes), not_fixes=tuple(not_fixes)))
    ahead = [f for f in problem.fixes if f.verified is True and id(f) not in behind]
    rest = [f for f in problem.fixes if f.verified is not True]
    trailing = [f for f in problem.fixes if id(f) in behind]
    return dataclasses.replace(problem, fixes=(*ahead, *trailing, *rest))


def _behind_the_best(fixes: list[Fix], held: dict[int, Rerun]) -> tuple[list[Fix], set[int]]:
    """`fixes` with the evidence of each confirmed one whose copy ended far behind the
    best confirmed copy of the same length (`copies_behind`) saying by how much, and the
    ids of those fixes (ranked after the other verified ones). Both stay verified: each
    copy held; the order says which to apply."""
    behind = {
        index: (
            f"; ranked after {fixes[best].family}: this copy's loss ended at "
            f"{held[index].final_loss:.4g} (its last tenth's mean, from "
            f"{held[index].first_loss:.4g} at its first step), where {fixes[best].family}'s "
            f"copy, run as long, ended at {held[best].final_loss:.4g}"
        )
        for index, best in copies_behind(
            held, {i for i, fix in enumerate(fixes) if fix.family in UPDATE_REMEDIES}
        ).items()
    }
    told = [
        dataclasses.replace(fix, evidence=f"{fix.evidence}{behind[i]}") if i in behind else fix
        for i, fix in enumerate(fixes)
    ]
    return told, {id(fix) for i, fix in enumerate(told) if i in behind}


# A held copy of a remedy on the updates (a lower rate, clipping: they can hold finite
# while training crawls) whose loss ended more than this many times the best held copy's,
# run as long, trails it: a lower rate's copy of a regression ended at 167, where
# clipping's reached 35 and always predicting the mean scores 129. Any other copy
# trails only `BEHIND_RANKED` times behind (float32 variables under a float16 policy,
# the fix of the cause, ended at 2.1 from 2389 where clipping each value reached 0.48).
COPY_BEHIND = 2.0


def copies_behind(held: Mapping[int, Rerun], crawls: Collection[int] = ()) -> dict[int, int]:
    """Each held copy that ended far behind the best held copy of the same length, with
    that best one's key; `crawls`: the keys of remedies on the updates.

    Far behind: with both losses above zero, a final loss more than `COPY_BEHIND` times
    the best's for one of `crawls`, `BEHIND_RANKED` times for the others; else (a loss
    that crosses zero, a Gaussian's negative log-likelihood) a fall from the first loss
    less than that fraction of the best's fall (clipping that left a copy's loss at 100
    where a lower rate trained it from 10.2 to -0.07).
    """
    ended = {i: r for i, r in held.items() if r.final_loss is not None and r.first_loss is not None}
    behind: dict[int, int] = {}
    for index, rerun in ended.items():
        ratio = COPY_BEHIND if index in crawls else BEHIND_RANKED
        rivals = [
            (r.final_loss, i) for i, r in ended.items() if i != index and r.steps == rerun.steps
        ]
        if not rivals:
            continue
        best_loss, best = min(rivals)
        best_rerun = ended[best]
        if min(rerun.final_loss, best_loss) > 0:
            far = rerun.final_loss > ratio * best_loss
        else:
            fell, best_fell = (
                rerun.first_loss - rerun.final_loss,
                best_rerun.first_loss - best_loss,
            )
            far = best_fell > 0 and fell < best_fell / ratio
        if far:
            behind[index] = best
    return behind


def _stronger_if_failed(
    fix: Fix, rerun: Rerun, baseline: Rerun | None, reruns: _Reruns, to_end: bool
) -> tuple[Fix, Rerun, Rerun | None, str | None]:
    """A patch no trial ran whose copy did not hold, and that has a `stronger` one (the
    learning rate lowered a decade further): the stronger patch's copy, rerun the same
    way while reruns are left, and so on. Returns the fix judged last, its rerun, the
    baseline, and, when a gentler patch failed before it, what its evidence adds."""
    failed = []
    while rerun.judged and not rerun.held and fix.stronger is not None and reruns.left:
        if not fix.stronger.patch:
            break
        failed.append(f"{fix.title.rstrip('.')}: applied, {rerun.why}")
        fix = fix.stronger
        rerun, baseline = reruns.run(fix.family, fix.patch, True, to_end)
    return fix, rerun, baseline, ("tried after " + "; ".join(failed)) if failed else None


def _expected_only(item: NotFix) -> bool:
    """A remedy said not to help on an expectation that no trial inside the run tried,
    or whose trial could not tell."""
    return not item.structural and untried_patch(None, item.evidence)


def _borne_out(item: NotFix, rerun: Rerun, baseline: Rerun | None) -> NotFix:
    """A not-fix whose patched copy failed sooner than the unchanged copy rerun the same
    way: its expectation (a smaller rate delays the overflow, say) is replaced by what
    the reruns showed."""
    failed = rerun.failed_step
    original = baseline.failed_step if baseline is not None else None
    if not rerun.judged or failed is None or original is None or failed >= original:
        return item
    why = (
        f"Applied, it made things no better: the patched copy failed sooner, at step "
        f"{failed} (the unchanged copy at step {original})."
    )
    return dataclasses.replace(item, why=why)


class _Reruns:
    """The reruns for one problem: the unchanged copy once (the baseline an untried patch
    is judged against), each patch once, at most `MAX_CONFIRMED`; once a rerun was
    stopped from writing the user's files, the rest are not run (each would write the
    same) and each gets that stopped rerun as its answer."""

    def __init__(
        self,
        script: str,
        args: list[str],
        step: int,
        steps_past: int,
        timeout: float,
        signalled: Callable[[], bool],
        reference: Sequence[tuple[int, float]] = (),
    ) -> None:
        self._script, self._args, self._step = script, args, step
        self._reference = reference
        self._steps_past, self._timeout, self._signalled = steps_past, timeout, signalled
        self._done = 0
        # The problem is one of learning (a silent failure): a patched copy holds only
        # when its loss ends clearly below the run's (`patched_rerun._learned_more`).
        self.learn_more = False
        # The variables of a broken gradient path: a patched copy that mended it holds
        # whatever other path it found broken (`patched_rerun._broken_elsewhere`).
        self.disconnected: frozenset[str] = frozenset()
        # The folder's contents before the run: what the run made is left out of a copy.
        self.listing: frozenset[str] | None = None
        self._baseline: Rerun | None = None
        self._stopped: Rerun | None = None

    @property
    def left(self) -> bool:
        return self._done < MAX_CONFIRMED and not self._signalled()

    def run(
        self, family: str, patch: str, untried: bool, to_end: bool = False
    ) -> tuple[Rerun, Rerun | None]:
        """The patched copy's rerun (to the script's end, within the time, when
        `to_end`), and the unchanged copy's when `untried` (else None)."""
        self._done += 1
        if untried and self._baseline is None and self._stopped is None:
            self._baseline = self._rerun("the unchanged script", None, self._steps_past)
        if self._stopped is None:
            # A patch that computes the loss in other units is not held against the run's.
            reference = () if family in RESCALES_THE_LOSS else self._reference
            steps_past = None if to_end else self._steps_past
            return self._rerun(family, patch, steps_past, reference), self._baseline
        return self._stopped, self._baseline

    def _rerun(
        self,
        what: str,
        patch: str | None,
        steps_past: int | None,
        reference: Sequence[tuple[int, float]] = (),
    ) -> Rerun:
        copy = "a patched copy" if patch else "a copy"
        _say(f"{what}: running {copy} of your folder from the start")
        rerun = rerun_patched(
            self._script,
            self._args,
            patch,
            self._step,
            steps_past,
            self._timeout,
            reference,
            learn_more=self.learn_more and patch is not None,
            disconnected=self.disconnected,
            listing=self.listing,
        )
        if rerun.interrupted and self._signalled():
            # The signal that stopped the run stopped its copy too, not its time.
            rerun = Rerun(
                False,
                rerun.steps,
                f"the copy was stopped by the signal that stopped your run, after "
                f"{rerun.steps} steps, so it judges nothing",
                inconclusive=True,
            )
        _say(f"{what}: {rerun.why}")
        if rerun.blocked:
            self._stopped = rerun
        return rerun


def _not_confirmed(fix: Fix, why: str, untried: bool) -> Fix:
    """A fix whose rerun judged nothing (stopped from writing the user's files, or it
    wrote no report): its verdict stays as the run gave it, and it says why."""
    if untried:
        return dataclasses.replace(fix, evidence=f"not confirmed: {why}{_untried_note(fix)}")
    return dataclasses.replace(fix, evidence=f"{fix.evidence}; not confirmed: {why}")


def _untried_note(fix: Fix) -> str:
    """Why no trial inside the run tried `fix` (or what its trial could not tell), in
    brackets, from its evidence."""
    if fix.evidence and not fix.evidence.startswith("not tried"):
        return f" (inside the run: {fix.evidence})"
    untried = (
        fix.evidence.removeprefix("not tried: ").removeprefix("not tried") if fix.evidence else ""
    )
    return f" (not tried inside the run: {untried})" if untried else " (not tried inside the run)"


def _may_only_delay(fix: Fix, problem: Finding, rerun: Rerun, expected: str | None = None) -> Fix:
    """A fix that a rerun confirmed for a failure that built up over training (a forward
    overflow or domain error, gradients growing step after step), and that leaves the
    op that failed as it was (a lower learning rate, standardised data): its copy ran
    to the script's end within the time, and the evidence says how far it held, and
    that training longer than the script does may still meet the failure, slowed, not
    removed (with the expectation it was listed under). Clipping is left alone: it
    leaves the small updates of a slow drift as they were, so what it held off was the
    large ones."""
    if fix.verified is not True or fix.family not in SLOWS_ONLY:
        return fix
    if problem.category not in BUILDS_UP:
        return fix
    held = "to the end of your script" if rerun.to_end else "as far as it ran"
    note = (
        f"; {SLOWS_ONLY[fix.family]}, and the failure built up over training: the copy "
        f"held {held}, but a longer run may meet it later"
    )
    if expected:
        note += f" (listed before as: {expected})"
    return dataclasses.replace(fix, evidence=f"{fix.evidence}{note}")


def _rerun_only(fix: Fix, held: bool, why: str, baseline) -> Fix:
    """A patch no trial ran, judged by its rerun against the unchanged copy's; the
    evidence leads with what the reruns showed, then why no trial inside the run tried it."""
    inside = _untried_note(fix)
    if baseline.held:
        note = f"{why}, but {baseline.why} too, so the rerun cannot tell"
        return dataclasses.replace(fix, evidence=note + inside)
    if held and fix.clamped_share is not None:  # held, but as a rewritten computation
        note = f"{why}, where {baseline.why}{clamp_caveat(fix)}"
        return dataclasses.replace(fix, verified=None, evidence=note + inside)
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
