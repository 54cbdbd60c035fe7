"""Run a copy of the user's folder, with one patch applied, from the start under the doctor.

This is the proof behind "verified": not the trial inside the failing run, but the
patched script itself training again, in a scratch copy (`scratch_copy`: the user's
files are never touched), past the step where the original failed. `gradient-doctor
run` confirms each verified fix this way when the run was short, and `gradient-doctor
fix` keeps the patch that passes it. The copy's process runs under its write guard
(`write_guard`): a rerun that tried to write one of the user's own files through a link
of the copy, or by an absolute path, is stopped, and judges nothing (`Rerun.blocked`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gradient_doctor.cli.outside_paths import OutsidePaths
from gradient_doctor.cli.scratch_copy import copy_folder
from gradient_doctor.cli.write_guard import SCRATCH_PREFIX
from gradient_doctor.core.findings import trial_cannot_tell
from gradient_doctor.core.fix_trials import BARELY_MOVED, diverged, not_moving
from gradient_doctor.core.patches import PatchError, apply_unified_diff
from gradient_doctor.core.run_series import OBJECTIVE_LOSS
from gradient_doctor.render.text import first_sentence


@dataclass(frozen=True)
class Rerun:
    """How the patched copy did.

    Attributes:
        held: it trained past the original failing step with nothing wrong.
        steps: how many steps it trained.
        why: what happened, in words (for the evidence).
        blocked: it was stopped from writing one of the user's own files (or found one
            changed through a link of the copy): it judges nothing, `why` says what.
        failed_step: the step of the first problem the copy found, or None.
        inconclusive: the copy wrote no report (it crashed before writing one), or its
            time ran out before it reached the original failing step: it judges
            nothing either way; `why` says so.
        to_end: it held to the end of the script.
        crashed: the copy's script raised an error of its own (not a numerical
            problem): the patch as written fails, which says nothing of the remedy.
        interrupted: a signal stopped the copy (its time ran out, or the signal that
            stopped the run reached it too).
        first_loss, final_loss: the copy's first loss and the mean of its last tenth's,
            with one optimizer (None otherwise): held copies of one problem's fixes
            are ranked by them (`fix_confirmation._behind_the_best`).
    """

    held: bool
    steps: int
    why: str
    blocked: bool = False
    failed_step: int | None = None
    inconclusive: bool = False
    to_end: bool = False
    crashed: bool = False
    interrupted: bool = False
    first_loss: float | None = None
    final_loss: float | None = None

    @property
    def judged(self) -> bool:
        """The rerun says something of the patch (held or not)."""
        return not (self.blocked or self.inconclusive)


def untried_patch(verified: bool | None, evidence: str | None) -> bool:
    """A fix's patch no trial inside the run could try (module-level code, a surrogate
    loss term), or whose trial could not tell (it ended saying "this trial cannot
    tell"): its rerun proves it only against the unchanged copy, rerun the same way."""
    evidence = evidence or "not tried"
    return verified is None and (evidence.startswith("not tried") or trial_cannot_tell(evidence))


def rerun_patched(
    script: str,
    args: list[str],
    patch: str | None,
    failed_at: int,
    steps_past: int | None,
    timeout: float | None = None,
    reference: Sequence[tuple[int, float]] = (),
    learn_more: bool = False,
    disconnected: frozenset[str] = frozenset(),
    listing: frozenset[str] | None = None,
) -> Rerun:
    """Copy the working folder, apply `patch`, run the copy of `script` under the doctor
    (no trials) from the start to `steps_past` steps past `failed_at` (None: to the
    script's end), or to the script's end or `timeout` seconds, when either comes
    first: the verdict says which.

    `script` is relative to the working folder, which is what gets copied; `patch`
    None runs the copy unchanged (the baseline a patch is judged against).
    `reference`: the original run's (step, loss) points (`loss_points`), which a copy
    must not trail far behind over the steps before the original failed (`_far_behind`);
    empty when the patch computes the loss in other units (standardised targets).
    `learn_more`: the problem is one of learning, not of a value (a silent failure):
    the copy holds only when its loss ends clearly below the run's at the same steps.
    `disconnected`: the variables the problem left without a gradient, when it is a
    broken gradient path: the copy then goes on past a path broken elsewhere (another
    problem of the run, which this patch is not for: `--keep-going`), and holds when
    every one of them got a gradient and it trained well.
    `listing`: the folder's contents before the run began (`folder_listing`): what the
    run made since (a checkpoint the script resumes from when present) is left out of
    the copy, which then starts where the run started.
    """
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}rerun-") as scratch:
        copy = copy_folder(os.getcwd(), os.path.join(scratch, "copy"), listing)
        try:
            for path, text in apply_unified_diff(patch or "", os.getcwd()).items():
                target = os.path.join(copy.root, path)
                if os.path.islink(target):
                    os.unlink(target)
                with open(target, "w", encoding="utf-8", newline="") as handle:
                    handle.write(text)
        except (PatchError, OSError) as error:
            return Rerun(False, 0, f"the patch did not apply ({error})")
        limit = failed_at + 1 + steps_past if steps_past is not None else None
        # Statistics every step (PyTorch): units a patch killed are warned of in time.
        options = [
            *("--trial-steps", "0", "--progress", "0", "--sample-every", "1"),
            *(("--stop-after", str(limit)) if limit is not None else ()),
            *(("--keep-going",) if disconnected else ()),
        ]
        guard = copy.guard(os.path.join(scratch, "refused.log"))
        guarded = guard.save(os.path.join(scratch, "guard.json"))
        outside = OutsidePaths(args, os.getcwd(), scratch)
        with outside:
            report, silence = doctor_report(
                script, outside.rerun_args, copy.root, scratch, options, timeout, guard=guarded
            )
        trespass = copy.trespass(guard)
    if trespass is not None:
        steps = report.get("steps_watched", 0) if report else 0
        return Rerun(False, steps, trespass, blocked=True)
    what = "the patched copy" if patch else "the unchanged copy"
    if report is None:
        rerun = Rerun(False, 0, f"{what} wrote no report: {silence}", inconclusive=True)
    else:
        rerun = _judged(
            report, failed_at, what, limit, timeout, reference, learn_more, disconnected
        )
        rerun = dataclasses.replace(rerun, interrupted=bool(report.get("interrupted")))
    if outside.notes:
        rerun = dataclasses.replace(rerun, why=f"{rerun.why} ({'; '.join(outside.notes)})")
    return rerun


def loss_points(series: Iterable[Mapping]) -> list[tuple[int, float]]:
    """A run's (step, loss) points from its report's series (as dicts: `name`, `steps`,
    `values`), the finite ones; empty with several optimizers' objectives only."""
    return [
        (int(step), float(value))
        for one in series
        if one.get("name") == "loss"
        for step, value in zip(one.get("steps", ()), one.get("values", ()))
        if value is not None and math.isfinite(value)
    ]


def _judged(
    report: dict | None,
    failed_at: int,
    what: str,
    limit: int | None = None,
    timeout: float | None = None,
    reference: Sequence[tuple[int, float]] = (),
    learn_more: bool = False,
    disconnected: frozenset[str] = frozenset(),
) -> Rerun:
    """How a copy's run went, from its report: `limit` is the step it was stopped at
    (None: it ran as far as the script goes), and `timeout` the seconds after which it
    was stopped (its report then says `interrupted`), so a copy that held says how far.
    With `learn_more` (a silent failure) it holds only when it learned more than the run
    (`_learned_more`). With `disconnected` (the variables of a broken gradient path), a
    path the copy found broken to none of them is another problem, said and passed over."""
    if report is None:
        why = f"{what} wrote no report (it crashed, or ran too long to stop cleanly)"
        return Rerun(False, 0, why, inconclusive=True)
    steps = report.get("steps_watched", 0)
    elsewhere = [p for p in report["problems"] if _broken_elsewhere(p, disconnected)]
    problems = [p for p in report["problems"] if p not in elsewhere]
    timed_out = bool(report.get("interrupted")) and not problems
    if problems:
        first = problems[0]
        original = (
            f"your run found it at step {failed_at}"
            if first["category"] in LEARNING_FAILURES
            else f"the original failed at step {failed_at}"
        )
        return Rerun(
            False,
            steps,
            f"{what}, run from the start, found {first['category']} at step "
            f"{first.get('step')}{_place(first.get('origin'))} ({original})",
            failed_step=first.get("step"),
        )
    if report.get("script_error"):
        return Rerun(False, steps, f"{what} failed: {report['script_error']}", crashed=True)
    if steps <= failed_at:
        ended = f"was stopped after {timeout:.0f} s, at" if timed_out else "ended after"
        return Rerun(
            False,
            steps,
            f"{what} {ended} {steps} steps, before step {failed_at} where the "
            "original failed, so it cannot tell",
            inconclusive=timed_out,
        )
    stopped = timed_out or (limit is not None and steps >= limit)
    trained = f"{what} of your files trained {steps} steps from the start" + (
        f"{'' if stopped else ', to the end of your script,'} with no problem found"
        if learn_more
        else f"{'' if stopped else ', to the end of your script,'} with every loss and "
        f"gradient finite, past step {failed_at} where the original failed"
    )
    if elsewhere:
        trained += _other_paths(elsewhere, disconnected)
    if timed_out:
        trained += f" (the copy is stopped after {timeout:.0f} s: your script had more to run)"
    elif stopped:
        where = f"after {steps} steps" if learn_more else f"{steps - failed_at - 1} steps past it"
        trained += f" (the copy is stopped {where}: your script had more to run)"
    if not _losses_seen(report):
        return Rerun(
            False,
            steps,
            f"{trained}, but no loss of it was seen (no backward() on a loss: one computed "
            "inside torch.func's transforms, say), so whether it went on learning cannot be "
            "told",
            inconclusive=True,
        )
    rise = (
        _diverged_loss(report)
        or not_moving(*_norms_and_losses(report))
        or (None if learn_more else _barely_moved(report))  # a silent failure's own test
        or _far_behind(report, reference, failed_at)
    )
    if rise is not None:
        return Rerun(False, steps, f"{trained}, but {rise}, so training did not go on well")
    if learn_more:
        learned, compared = _learned_more(report, reference)
        if learned is None:
            return Rerun(False, steps, f"{trained}, but {compared}", inconclusive=True)
        if not learned:
            return Rerun(False, steps, f"{trained}, but {compared}")
        trained += f", {compared}"
        unlearned = _did_not_fall(report)
        if unlearned is not None:
            return Rerun(False, steps, f"{trained}, but {unlearned}")
    first, final = _first_and_final(report)
    return Rerun(
        True,
        steps,
        trained + _stalled_note(report),
        to_end=not stopped,
        first_loss=first,
        final_loss=final,
    )


def _broken_elsewhere(problem: dict, disconnected: frozenset[str]) -> bool:
    """Whether a copy's problem is a gradient path broken to none of `disconnected` (the
    variables of the path the patch mends): another break, which it is not for."""
    if not disconnected or problem.get("category") != "disconnected_gradients":
        return False
    variables = (problem.get("disconnected") or {}).get("variables") or ()
    return bool(variables) and disconnected.isdisjoint(variables)


def _other_paths(elsewhere: Sequence[dict], disconnected: frozenset[str]) -> str:
    """What a copy that mended its path still found broken elsewhere, in words."""
    names = [name for p in elsewhere for name in (p.get("disconnected") or {}).get("variables", ())]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    mended = sorted(disconnected)
    got = f"{mended[0]} got" if len(mended) == 1 else f"every one of {', '.join(mended)} got"
    return (
        f"; {got} a gradient, and the path it still found broken, to {shown}, is another "
        "problem of your run, which this patch is not for"
    )


def _first_and_final(report: dict) -> tuple[float | None, float | None]:
    """The copy's first loss and its last tenth's mean, with one optimizer; else Nones."""
    losses = [value for _, value in loss_points(report.get("series", ()))]
    if report.get("optimizers", 1) != 1 or not losses:
        return None, None
    tail = losses[-max(1, len(losses) // 10) :]
    return losses[0], sum(tail) / len(tail)


# A copy whose loss, over the last tenth of the steps before the original failed, was
# on average more than this many times the original's there learned far slower than the
# run it is to fix (a learning rate lowered a hundredfold from the start, whose model
# never left predicting the majority class: 0.091 where the run had reached 0.0035).
SLOWER_THAN_THE_RUN = 10.0


# The fewest steps before the original failed over which a copy's pace is compared with
# the run's: a run that failed at step 4 compared one step's loss, 0.013 against 0.00018,
# and rejected a lower rate that then learned best of all the patches.
BEHIND_OVER_STEPS = 5


def _far_behind(report: dict, reference: Sequence[tuple[int, float]], failed_at: int) -> str | None:
    """Whether the copy's loss trailed the original run's far behind over the steps just
    before the original failed, in words; None when it did not, or cannot be compared
    (no reference, several objectives, a loss that goes below zero: no ratio)."""
    if not reference or report.get("optimizers", 1) != 1 or failed_at < 1:
        return None
    start = failed_at - max(1, failed_at // 10)

    def window(points: Iterable[tuple[int, float]]) -> list[float]:
        return [value for step, value in points if start <= step < failed_at]

    original = window(reference)
    copy = window(loss_points(report.get("series", ())))
    if len(original) < BEHIND_OVER_STEPS or len(copy) < BEHIND_OVER_STEPS:
        return None  # a step or two says nothing of a pace (one batch's loss, 73x apart)
    if min(original + copy) < 0:
        return None
    theirs, mine = sum(original) / len(original), sum(copy) / len(copy)
    if mine <= SLOWER_THAN_THE_RUN * max(theirs, 1e-12):
        return None
    steps = f"step {start}" if start == failed_at - 1 else f"steps {start}-{failed_at - 1}"
    return (
        f"it learned far slower than your run: over {steps}, before the original failed, "
        f"its loss averaged {mine:.4g} where your run's averaged {theirs:.4g} "
        f"({mine / max(theirs, 1e-12):.0f}x)"
    )


# Problems of learning, not of a value: nothing went non-finite, so a patched copy that
# stays finite proves nothing; it must learn more than the run did (`learn_more`).
LEARNING_FAILURES = frozenset(
    {"logits_as_probabilities", "probabilities_as_logits", "loss_diverged"}
)
# A copy that fixes a silent failure must end with its loss at most this share of the
# run's at the same steps (the run that read raw outputs as probabilities ended at 8.07,
# each patched copy at 0.0036).
LEARNED_MORE = 0.9


def _learned_more(report: dict, reference: Sequence[tuple[int, float]]) -> tuple[bool | None, str]:
    """Whether the copy's loss, over the last tenth of its steps, averaged clearly below
    the run's over the same steps, and the comparison in words; None when the two cannot
    be compared (no loss of the run there, several objectives, a loss below zero)."""
    untold = "so whether it learned more cannot be told"
    copy = loss_points(report.get("series", ()))
    if not copy or not reference or report.get("optimizers", 1) != 1:
        return None, f"its loss cannot be compared with your run's, {untold}"
    last = copy[-1][0]
    start = last - max(1, (last + 1) // 10)
    mine = [value for step, value in copy if start < step <= last]
    theirs = [value for step, value in reference if start < step <= last]
    if theirs and min(theirs) < 0 <= min(mine, default=-1.0):
        return _learned_from_its_start(report, untold)
    if not mine or not theirs or min(mine + theirs) < 0:
        return None, f"your run has no loss at its last steps to compare, {untold}"
    ours, yours = sum(mine) / len(mine), sum(theirs) / len(theirs)
    steps = f"steps {start + 1}-{last}" if last > start + 1 else f"step {last}"
    compared = f"its loss over {steps} averaging {ours:.4g} where your run's averaged {yours:.4g}"
    learned = ours <= LEARNED_MORE * yours
    return learned, compared if learned else compared + _short_of(ours, yours)


def _did_not_fall(report: dict) -> str | None:
    """Why a copy that ended below the run did not learn either, in words: its own loss
    over its last tenth was not below `LEARNED_MORE` of its first (a lower rate that
    learned for a while, then diverged again, ending at 0.88 from 0.85 where the run
    ended at 5.3); None when it fell, or cannot be told (several objectives, a loss
    that starts at or below zero)."""
    first, final = _first_and_final(report)
    if first is None or final is None or first <= 0 or final <= LEARNED_MORE * first:
        return None
    return (
        f"its own loss did not fall ({first:.4g} at its first step, {final:.4g} over its "
        "last tenth), so it did not learn either"
    )


# A copy trained from the start whose one loss, over its last tenth, is within
# `BARELY_MOVED` of its first, over at least this many steps, did not learn: clipping
# every update of a regression on unscaled features to norm 1 held it finite, at
# 1.703e11 -> 1.698e11 over 200 steps; a clamp of dead units' zero variance held an LSTM
# classifier at 0.8546 -> 0.8544 over the 48 steps of its whole script.
MOVED_OVER_STEPS = 20


def _barely_moved(report: dict) -> str | None:
    """Why a finite copy did not go on learning, in words, when its loss barely moved
    from its first step to its last tenth (`BARELY_MOVED`); None when it moved, or
    cannot be told (several objectives, a loss at or below zero, a short copy)."""
    first, final = _first_and_final(report)
    if first is None or final is None or first <= 0:
        return None
    if report.get("steps_watched", 0) < MOVED_OVER_STEPS:
        return None
    change = (final - first) / first
    if abs(change) >= BARELY_MOVED:
        return None
    direction = "lower" if change < 0 else "higher"
    return (
        f"its loss barely moved ({first:.4g} at its first step, {final:.4g} over its last "
        f"tenth: {100 * abs(change):.1f}% {direction})"
    )


def _short_of(ours: float, yours: float) -> str:
    """Why a copy's loss is no proof it learned more: ", so it learned no better", or,
    for one lower by less than `LEARNED_MORE` asks, by how much it was."""
    if ours >= yours:
        return ", so it learned no better"
    lower = 100.0 * (1.0 - ours / yours)
    return (
        f": lower by {lower:.0f}%, less than the {100.0 * (1.0 - LEARNED_MORE):.0f}% that "
        "tells a fix from the noise within these steps, so it is not verified"
    )


def _learned_from_its_start(report: dict, untold: str) -> tuple[bool | None, str]:
    """For a copy whose loss cannot be held against the run's (the run's fell below zero,
    which the copy's, a loss with a floor, cannot): whether the copy's own loss fell from
    its first step to at most `LEARNED_MORE` of it over its last tenth, in words."""
    first, final = _first_and_final(report)
    if first is None or final is None or first <= 0:
        return None, f"its loss cannot be compared with your run's, {untold}"
    learned = final <= LEARNED_MORE * first
    compared = (
        f"its loss falling from {first:.4g} to {final:.4g} over its last tenth of steps (your "
        "run's fell below zero, where a loss with a floor cannot: the two are not compared)"
    )
    return learned, compared if learned else compared + _short_of(final, first)


def _norms_and_losses(report: dict) -> tuple[list, list]:
    """The copy's global gradient norms (finite), and its losses at the same steps (empty
    when some step's loss was not recorded)."""
    series = {s.get("name"): s for s in report.get("series", ())}
    norms, losses = series.get("grad_norm/global", {}), series.get("loss", {})
    values = list(norms.get("values", ()))
    steps = norms.get("steps") or range(len(values))
    at = dict(
        zip(losses.get("steps") or range(len(losses.get("values", ()))), losses.get("values", ()))
    )
    paired = [(norm, at.get(step)) for step, norm in zip(steps, values) if norm is not None]
    if any(loss is None for _, loss in paired):
        return [norm for norm, _ in paired], []
    return [norm for norm, _ in paired], [loss for _, loss in paired]


def _series(report: dict) -> dict[str, list]:
    """The copy's series by name, each its finite values."""
    return {
        series.get("name"): [v for v in series.get("values", ()) if v is not None]
        for series in report.get("series", ())
    }


def _losses_seen(report: dict) -> bool:
    """Whether the copy's report holds a finite loss at some step (the loss, or with
    several optimizers one objective's): without one, finite steps say nothing of
    learning."""
    return any(
        value is not None
        for series in report.get("series", ())
        if series.get("name") == "loss" or str(series.get("name", "")).startswith(OBJECTIVE_LOSS)
        for value in series.get("values", ())
    )


# The copy's own warnings that say a part of the network stopped learning, though every
# value stayed finite (a lower rate that left a layer's ReLUs all dead, say).
_STALLED = ("dead_units", "vanishing_gradients")


def _stalled_note(report: dict) -> str:
    """'; but the copy itself warned: dead_units from step 25 (...)' when the copy's
    report warns that units died or gradients vanished, else ''. The copy held: whether
    that part matters (a skip connection may carry the signal past it) is the user's
    to judge, so it is said, not ruled."""
    stalled = [w for w in report.get("warnings", ()) if w.get("category") in _STALLED]
    if not stalled:
        return ""
    said = "; ".join(
        f"{w['category']} from step {w.get('step')} ({first_sentence(w.get('explanation', ''))})"
        for w in stalled
    )
    return f"; but the copy itself warned: {said}"


def _diverged_loss(report: dict) -> str | None:
    """Whether the copy's loss diverged, in words, as a fix trial's is judged: with one
    optimizer its loss; with several (a GAN's), each objective's loss (the step's last
    loss is one of several), none of which may diverge."""
    series = {s.get("name"): s.get("values", ()) for s in report.get("series", ())}
    optimizers = report.get("optimizers", 1)  # written only when several
    if optimizers == 1:
        return diverged(series["loss"]) if "loss" in series else None
    objectives = sorted(
        (int(name[len(OBJECTIVE_LOSS) :]), values)
        for name, values in series.items()
        if name.startswith(OBJECTIVE_LOSS) and name[len(OBJECTIVE_LOSS) :].isdigit()
    )
    for number, values in objectives:
        whose = (
            f"objective {number}'s loss (of {len(objectives)}, in the order of the step's updates)"
        )
        rise = diverged(values, whose, alone=False)
        if rise is not None:
            return rise
    return None


def _place(origin: dict | None) -> str:
    """ " in Pow at train.py:24 `loss = ((rate - y) ** 2).mean()`": where a rerun's problem
    arose, so a patch that moved the trouble downstream says where it went; "" when the
    rerun named no op."""
    if not origin or not origin.get("op"):
        return ""
    gradient_of = origin.get("gradient_of")
    place = f" in {origin['op']}" + (f", the gradient of {gradient_of}," if gradient_of else "")
    if origin.get("file"):
        place += f" at {origin['file']}:{origin.get('line')}"
    return place + (f" `{origin['code']}`" if origin.get("code") else "")


# How long a copy stopped at its time limit has to write its report before it is killed.
TERMINATE_GRACE_SECONDS = 30.0


# How much of a silent copy's last output its verdict quotes.
_LAST_WORDS = 300


def doctor_report(
    script: str,
    args: list[str],
    cwd: str,
    scratch: str,
    options: list[str],
    timeout: float | None = None,
    quiet: bool = True,
    guard: str | None = None,
) -> tuple[dict | None, str]:
    """Run `gradient-doctor run` on `script` in `cwd`: its JSON report or None, and why
    there is none ("" when there is one): how the process ended and, when its output was
    kept (`quiet`), its last words, so that a copy that crashed says with what.

    `guard`: a saved `WriteGuard` the run's process installs before anything runs.
    """
    number = len(os.listdir(scratch))
    report = os.path.join(scratch, f"report-{number}.json")
    doctor = ["gradient_doctor"] if guard is None else ["gradient_doctor.cli.write_guard", guard]
    command = [sys.executable, "-m", *doctor, "run", "--report", report, *options]
    log = os.path.join(scratch, f"output-{number}.log") if quiet else None
    with open(log, "wb") if log else _inherited() as output:
        process = subprocess.Popen([*command, script, *args], cwd=cwd, stdout=output, stderr=output)
        ended = _waited(process, timeout)
    try:
        with open(report, encoding="utf-8") as handle:
            return json.load(handle), ""
    except (OSError, ValueError):
        pass
    return None, ended + _last_words(log)


def _waited(process: subprocess.Popen, timeout: float | None) -> str:
    """Wait for the copy's process; how it ended, in words."""
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM: the doctor stops the script and writes its report ("interrupted"),
        # which says how far the copy got; killed only when it does not end in time.
        process.terminate()
        try:
            process.wait(timeout=TERMINATE_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return (
                f"it was still running after {timeout:.0f} s and did not stop within "
                f"{TERMINATE_GRACE_SECONDS:.0f} s of being asked to, so it was killed"
            )
        return (
            f"it was asked to stop after {timeout:.0f} s and ended with status {process.returncode}"
        )
    return f"it ended with status {process.returncode}"


def _last_words(log: str | None) -> str:
    """ "; its last output: ..." from the copy's kept output, or ""."""
    if log is None:
        return ""
    try:
        with open(log, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(handle.tell() - 4 * _LAST_WORDS, 0))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    tail = " | ".join(lines[-3:])[-_LAST_WORDS:]
    return f"; its last output: {tail}" if tail else ""


@contextlib.contextmanager
def _inherited():
    """The parent's own stdout and stderr for the child (`Popen`'s None)."""
    yield None


def relative_script(script: str) -> str | None:
    """The script's path relative to the working folder, or None when it lies outside."""
    relative = os.path.relpath(os.path.abspath(script))
    if relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
        return None
    return relative
