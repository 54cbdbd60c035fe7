"""`gradient-doctor fix`: diagnose, rerun a copy with the best verified patch, keep it if it held.

The trials of a diagnosis run the patch inside the failing run; this is the proof a
user can rerun: the patched copy of their files trains again from the start, under
the doctor, in a scratch folder (their own files are never touched), and the patch is
written out only when that run went past the step where the original one failed
with nothing wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from gradient_doctor.core.patches import PatchError, apply_unified_diff
from gradient_doctor.errors import UsageError

EXIT_FIXED, EXIT_NOT_FIXED = 0, 1
# Folders never copied into the scratch folder: tools' caches and environments.
_SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "env",
        "__pycache__",
        ".pytest_cache",
        ".ruff_cache",
        ".mypy_cache",
        "node_modules",
        ".ipynb_checkpoints",
    }
)
# Files larger than this are linked into the scratch folder instead of copied (data).
_LINK_ABOVE_BYTES = 32 * 2**20
# Steps past the original failure the patched rerun must stay healthy for.
DEFAULT_STEPS_PAST = 200
# At most this many verified patches are rerun, best first.
MAX_CANDIDATES = 3
PATCH_HEADER = "# gradient-doctor fix"


@dataclass(frozen=True)
class Candidate:
    """A verified fix of the diagnosis: its family, title and patch."""

    family: str
    title: str
    patch: str


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
    _check_out(out)
    script = _relative_script(script)
    with tempfile.TemporaryDirectory(prefix="gradient-doctor-fix-") as scratch:
        report = _doctor(script, args, os.getcwd(), scratch, ["--trial-steps", str(trial_steps)])
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
                f"no fix of the {problem['category']} at step {failed_at} was verified, so "
                "there is no patch to prove; see the report above for what was tried"
            )
            return EXIT_NOT_FIXED
        for candidate in candidates[:MAX_CANDIDATES]:
            held, why = _rerun_patched(script, args, candidate, failed_at, steps_past, scratch)
            _say(f"{candidate.family}: {why}")
            if held:
                _write_patch(out, candidate, script)
                _say(
                    f"the patch held; written to {out}. Apply it in this folder with "
                    f"`patch -p1 < {out}` (or `git apply {out}`)."
                )
                return EXIT_FIXED
    _say("no verified patch held when the patched script was run again; nothing written")
    return EXIT_NOT_FIXED


def _candidates(problem: dict) -> Iterator[Candidate]:
    """The problem's verified fixes that have a patch, in the report's order (the fix
    that removes the cause is listed before the one that hides it)."""
    for fix in problem.get("fixes", []):
        if fix.get("verified") is True and fix.get("patch"):
            yield Candidate(fix["family"], fix["title"], fix["patch"])


def _rerun_patched(
    script: str,
    args: list[str],
    candidate: Candidate,
    failed_at: int,
    steps_past: int,
    scratch: str,
) -> tuple[bool, str]:
    """Copy the working folder, apply the patch, run the copy under the doctor."""
    root = os.path.join(scratch, candidate.family)
    _copy_tree(os.getcwd(), root)
    try:
        for path, text in apply_unified_diff(candidate.patch, os.getcwd()).items():
            target = os.path.join(root, path)
            if os.path.islink(target):
                os.unlink(target)
            with open(target, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
    except (PatchError, OSError) as error:
        return False, f"the patch did not apply ({error})"
    _say(f"{candidate.family}: rerunning the patched copy from the start ({candidate.title})")
    limit = failed_at + 1 + steps_past
    report = _doctor(
        script, args, root, scratch, ["--trial-steps", "0", "--stop-after", str(limit)]
    )
    if report is None:
        return False, "the patched run wrote no report"
    steps = report.get("steps_watched", 0)
    if report["problems"]:
        first = report["problems"][0]
        return False, (
            f"the patched run found {first['category']} at step {first.get('step')} "
            f"(the original failed at step {failed_at})"
        )
    if report.get("script_error"):
        return False, f"the patched script failed: {report['script_error']}"
    if steps <= failed_at:
        return False, (
            f"the patched run ended after {steps} steps, before step {failed_at} where the "
            "original failed, so it cannot tell"
        )
    return True, (
        f"the patched copy trained {steps} steps from the start with every loss and "
        f"gradient finite, past step {failed_at} where the original failed"
    )


def _doctor(script: str, args: list[str], cwd: str, scratch: str, options: list[str]):
    """Run `gradient-doctor run` on `script` in `cwd`; its JSON report, or None."""
    report = os.path.join(scratch, f"report-{len(os.listdir(scratch))}.json")
    command = [sys.executable, "-m", "gradient_doctor", "run", "--report", report, *options]
    subprocess.run([*command, script, *args], cwd=cwd, check=False)
    try:
        with open(report, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _copy_tree(source: str, target: str) -> None:
    """Copy the working folder (caches and environments left out; big files linked)."""

    def copy(src: str, dst: str) -> None:
        if os.path.getsize(src) > _LINK_ABOVE_BYTES:
            os.symlink(os.path.abspath(src), dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(
        source,
        target,
        symlinks=True,
        ignore=lambda _, names: [n for n in names if n in _SKIPPED_DIRS],
        copy_function=copy,
    )


def _relative_script(script: str) -> str:
    """The script's path relative to the working folder, which is what gets copied."""
    relative = os.path.relpath(os.path.abspath(script))
    if relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
        raise UsageError(
            f"cannot fix {script!r}: it is outside the folder you run from, which is the "
            "folder that gets copied and patched. Run `gradient-doctor fix` from a folder "
            f"that holds the script, for example `cd {os.path.dirname(os.path.abspath(script))}`."
        )
    return relative


def _check_out(out: str) -> None:
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
            raise UsageError(
                f"`--out` would overwrite {out!r}, which is not a patch gradient-doctor "
                "wrote. Pass another path, for example `--out gradient-doctor.patch`."
            )


def _write_patch(out: str, candidate: Candidate, script: str) -> None:
    with open(out, "w", encoding="utf-8", newline="") as handle:
        handle.write(f"{PATCH_HEADER}: {candidate.family} for {script}: {candidate.title}\n")
        handle.write(candidate.patch)


def _say(text: str) -> None:
    print(f"gradient-doctor fix: {text}", file=sys.stderr, flush=True)
