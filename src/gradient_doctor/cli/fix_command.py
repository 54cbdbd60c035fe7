"""`gradient-doctor fix`: diagnose, rerun a copy with the best verified patch, keep it if it held.

The trials of a diagnosis run the patch inside the failing run; this is the proof a
user can rerun: the patched copy of their files trains again from the start, under
the doctor, in a scratch folder (their own files are never touched), and the patch is
written out only when that run went past the step where the original one failed
with nothing wrong.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

from gradient_doctor.cli.fix_confirmation import copies_behind, runs_to_the_end
from gradient_doctor.cli.patched_rerun import (
    Rerun,
    doctor_report,
    loss_points,
    relative_script,
    rerun_patched,
    untried_patch,
)
from gradient_doctor.cli.scratch_copy import folder_listing
from gradient_doctor.core.fix_trials import RESCALES_THE_LOSS
from gradient_doctor.core.trial_start import UPDATE_REMEDIES
from gradient_doctor.errors import UsageError

EXIT_FIXED, EXIT_NOT_FIXED = 0, 1
# Steps past the original failure the patched rerun must stay healthy for.
DEFAULT_STEPS_PAST = 200
# At most this many patches are rerun, best first (the verified ones, then the untried
# fixes', then the expected not-fixes'). Once a remedy on the updates held (a lower rate,
# clipping: they can hold finite while training crawls), the others listed alike
# (verified, or untried) are rerun too, and the one whose copy learned clearly best is
# written; a patch of the computation that held is written at once.
MAX_CANDIDATES = 5
PATCH_HEADER = "# gradient-doctor fix"


@dataclass(frozen=True)
class Candidate:
    """A fix of the diagnosis to rerun: its family, title and patch.

    `untried` marks a patch no trial inside the run could try (a surrogate loss term
    for missing gradients, module-level code): its rerun proves it only where the
    unchanged copy, rerun the same way, fails. `group` is where the diagnosis listed
    it: "verified", "untried" (a fix no trial tried), "not_fix" (an expected not-fix);
    the patches that held are compared within one group.
    """

    family: str
    title: str
    patch: str
    untried: bool = False
    group: str = "verified"


def fix_command(
    script: str,
    args: list[str],
    out: str,
    steps_past: int = DEFAULT_STEPS_PAST,
    trial_steps: int = 200,
) -> int:
    """Diagnose `script`, rerun it patched, write the patch that held to `out`.

    Returns:
        0 when a patch held (it is written to `out`) or the run was healthy (nothing
        to fix); 1 when no verified patch held.
    """
    check_out(out)
    relative = relative_script(script)
    if relative is None:
        raise UsageError(
            f"cannot fix {script!r}: it is outside the folder you run from, which is the "
            "folder that gets copied and patched. Run `gradient-doctor fix` from a folder "
            f"that holds the script, for example `cd {os.path.dirname(os.path.abspath(script))}`."
        )
    started = time.monotonic()
    # What the folder held before the diagnosis ran the script in it: each rerun's copy
    # leaves out what that run made (a checkpoint the script would resume from).
    listing = folder_listing(os.getcwd())
    with tempfile.TemporaryDirectory(prefix="gradient-doctor-fix-") as scratch:
        options = ["--trial-steps", str(trial_steps), "--confirm", "never"]
        report, _ = doctor_report(relative, args, os.getcwd(), scratch, options, quiet=False)
    # A copy run to the script's end (a remedy that may only delay a drift) gets the
    # time a confirmation rerun gets.
    to_end_seconds = max(3 * (time.monotonic() - started), 60.0)
    if report is None:
        _say("the diagnosis run wrote no report; nothing to fix")
        return EXIT_NOT_FIXED
    if not report["problems"]:
        _say(f"{script} ran healthy: nothing to fix")
        return EXIT_FIXED
    problem = report["problems"][0]
    failed_at = problem.get("step") or 0
    candidates = list(_candidates(problem))
    if not candidates:
        _say(
            f"no fix of the {problem['category']} at step {failed_at} was verified or could "
            "be written as a patch, so there is no patch to prove; see the report above for "
            "what was tried"
        )
        return EXIT_NOT_FIXED
    baseline = None
    losses = loss_points(report.get("series", ()))
    # The variables of a broken gradient path: a copy that mended it holds whatever
    # other path it found broken (as `run`'s confirmation judges it).
    disconnected = frozenset((problem.get("disconnected") or {}).get("variables") or ())
    rerun_copy = functools.partial(
        rerun_patched, relative, args, disconnected=disconnected, listing=listing
    )
    held: dict[int, Rerun] = {}
    for index, candidate in enumerate(candidates[:MAX_CANDIDATES]):
        first = candidates[min(held)] if held else None
        if first is not None and (
            candidate.group != first.group or first.family not in UPDATE_REMEDIES
        ):
            break  # a patch held: rivals only of a remedy on the updates, listed alike
        if candidate.untried and baseline is None:
            _say("the unchanged script: rerunning a copy from the start (no trial ran its patch)")
            baseline = rerun_copy(None, failed_at, steps_past)
            _say(f"the unchanged script: {baseline.why}")
        if candidate.untried and not baseline.judged:
            _say(f"{candidate.family}: not rerun: {baseline.why}, so a rerun cannot tell")
            continue
        if candidate.untried and baseline.held:
            _say(f"{candidate.family}: not rerun: {baseline.why} too, so a rerun cannot tell")
            continue
        _say(f"{candidate.family}: rerunning a patched copy from the start ({candidate.title})")
        # Held against the run's loss, unless the patch computes it in other units.
        reference = () if candidate.family in RESCALES_THE_LOSS else losses
        if runs_to_the_end(problem["category"], candidate.family):
            rerun = rerun_copy(candidate.patch, failed_at, None, to_end_seconds, reference)
        else:
            rerun = rerun_copy(candidate.patch, failed_at, steps_past, reference=reference)
        _say(f"{candidate.family}: {rerun.why}")
        if rerun.blocked:  # every rerun would write the same file of yours
            break
        if rerun.held:
            held[index] = rerun
    if held:
        chosen = _best(candidates, held)
        _write_patch(out, candidates[chosen], relative)
        _say(
            f"the patch held; written to {out}. Apply it in this folder with "
            f"`patch -p1 < {out}` (or `git apply {out}`)."
        )
        return EXIT_FIXED
    _say("no verified patch held when the patched script was run again; nothing written")
    return EXIT_NOT_FIXED


def _candidates(problem: dict) -> Iterator[Candidate]:
    """The problem's verified fixes that have a patch, in the report's order (the fix
    that removes the cause is listed before the one that hides it), then the patches
    no trial could try, the fixes' and then the expected not-fixes'."""
    fixes = [fix for fix in problem.get("fixes", []) if fix.get("patch")]
    for fix in fixes:
        if fix.get("verified") is True:
            yield Candidate(fix["family"], fix["title"], fix["patch"])
    for fix in fixes:
        if untried_patch(fix.get("verified"), fix.get("evidence")):
            yield Candidate(fix["family"], fix["title"], fix["patch"], True, "untried")
    # A remedy said not to help on an expectation no trial could try (a lower rate, for
    # an unchanged PyTorch script), as `run`'s confirmation reruns it.
    for item in problem.get("not_fixes", []):
        expected = not item.get("structural", True)
        if item.get("patch") and expected and untried_patch(None, item.get("evidence")):
            title = "first listed as not expected to help; no trial inside the run could try it"
            yield Candidate(item["remedy"], title, item["patch"], True, "not_fix")


def _best(candidates: list[Candidate], held: dict[int, Rerun]) -> int:
    """The candidate whose held copy to write: the first in the diagnosis's order whose
    copy did not end far behind another's run as long (`copies_behind`), said when one
    that came before it did."""
    behind = copies_behind(held, {i for i in held if candidates[i].family in UPDATE_REMEDIES})
    # (Each copy judged against its best rival: with losses that cross zero, judged by
    # their falls, every one could trail another; then the diagnosis's order stands.)
    chosen = next((index for index in held if index not in behind), min(held))
    for index in held:
        if index < chosen and index in behind:
            rerun, best = held[index], held[behind[index]]
            _say(
                f"{candidates[index].family} held too, but its copy's loss ended at "
                f"{rerun.final_loss:.4g} where {candidates[behind[index]].family}'s, run as "
                f"long, ended at {best.final_loss:.4g}: writing "
                f"{candidates[chosen].family}'s patch"
            )
    return chosen


# The names a patch file takes; any other suffix is replaced by `.patch` in a suggestion.
_PATCH_SUFFIXES = (".patch", ".diff")


def check_out(out: str) -> None:
    """Refuse an output path that would overwrite a file that is not an earlier patch."""
    if os.path.isdir(out):
        raise UsageError(
            f"`--out` must name a file, but {out!r} is a folder. "
            f"Pass a file path, for example `--out {os.path.join(out, 'fix.patch')}`."
        )
    if os.path.exists(out):
        with open(out, encoding="utf-8", errors="replace") as handle:
            earlier = handle.readline().startswith(PATCH_HEADER)
        if not earlier:
            # A patch's name, whatever the refused file was (a script, notes, data).
            stem, suffix = os.path.splitext(out)
            other = f"{stem}.doctor{suffix if suffix in _PATCH_SUFFIXES else '.patch'}"
            raise UsageError(
                f"`--out` would overwrite {out!r}, which is not a patch gradient-doctor "
                f"wrote. Pass another path, for example `--out {other}`."
            )


def _write_patch(out: str, candidate: Candidate, script: str) -> None:
    with open(out, "w", encoding="utf-8", newline="") as handle:
        handle.write(f"{PATCH_HEADER}: {candidate.family} for {script}: {candidate.title}\n")
        handle.write(candidate.patch)


def _say(text: str) -> None:
    print(f"gradient-doctor fix: {text}", file=sys.stderr, flush=True)
