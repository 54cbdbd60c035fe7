"""Run one script with its framework's adapter installed and produce the report."""

from __future__ import annotations

import os
import runpy
import time
from dataclasses import replace

from gradient_doctor.cli.fix_confirmation import confirm_fixes, confirmation_pending
from gradient_doctor.cli.interrupts import RunInterrupts, signal_name
from gradient_doctor.cli.own_warnings import plain_own_warnings
from gradient_doctor.cli.scratch_copy import folder_listing
from gradient_doctor.cli.script_runner import ScriptOutcome, run_script

EXIT_HEALTHY, EXIT_PROBLEM = 0, 1
# The exit status of a run a signal stopped is 128 + its number, as a shell reports it.
EXIT_SIGNAL_BASE = 128


def watched_run(
    script: str,
    args: list[str],
    report_path: str | None,
    keep_going: bool,
    trial_steps: int = 200,
    layer_stats: bool = True,
    html_path: str | None = None,
    tensorboard_dir: str | None = None,
    progress_seconds: float = 0.0,
    dump_dir: str | None = None,
    max_steps: int | None = None,
    confirm: str = "auto",
    framework: str | None = None,
    sample_every: int | None = None,
) -> int:
    """Watch `script`, print the diagnosis, write the reports asked for; return the exit
    status. A progress line goes to stderr every `progress_seconds` (0: none); with
    `dump_dir`, the first non-finite step is saved there for `gradient-doctor replay`;
    each proposed fix is tried for `trial_steps` steps (0: none); `layer_stats` False
    is the cheap mode (global checks only); `max_steps` stops training, healthy, after
    that many steps. With `confirm` "auto" (a run of at most two minutes) or "always",
    each verified fix is applied to a copy of the working folder and run again from
    the start; a fix whose copy does not hold is not verified (the reports are written
    before and after). `framework` "tensorflow" or "torch" picks the adapter; None reads
    it from the script's imports (`framework_choice.script_framework`).

    SIGINT and SIGTERM stop the script, not the doctor: the reports are written
    (status "interrupted" unless a problem was found first) and the status is 128 +
    the signal's number. A step being diagnosed when the signal comes is diagnosed
    to the end first. The script's own `sys.exit(N)`, N not 0, gives N."""
    interrupts = RunInterrupts(runpy.run_path.__code__)
    # From before the framework loads: a signal then still ends with a report.
    with interrupts, plain_own_warnings():
        from gradient_doctor.cli.framework_choice import run_adapter, script_framework
        from gradient_doctor.cli.report_outputs import write_outputs
        from gradient_doctor.render.progress import ProgressLine
        from gradient_doctor.render.terminal import render_report

        adapter = run_adapter(
            framework or script_framework(script),
            script,
            args,
            stop_on_problem=not keep_going,
            trial_steps=trial_steps,
            layer_stats=layer_stats,
            on_record=ProgressLine(progress_seconds) if progress_seconds > 0 else None,
            max_steps=max_steps,
            dump_dir=dump_dir,
            sample_every=sample_every,
            pending=confirmation_pending(confirm, trial_steps),
        )
        watcher, crash_dump = adapter.watcher, adapter.crash_dump
        # What the folder held before the script ran: a rerun's copy leaves out what the
        # run makes (a checkpoint the script would resume from), to start where it did.
        listing = folder_listing(os.getcwd()) if confirm != "never" and trial_steps > 0 else None
        # A signal stops the script, never the diagnosis of a step.
        interrupts.protect(*adapter.protected)
        watcher.install()
        outcome = ScriptOutcome()
        started = time.monotonic()
        try:
            outcome = run_script(script, args, adapter.at_end)
            watcher.finish()
        finally:
            interrupts.reporting()
            watcher.uninstall()
        signum = outcome.interrupted or interrupts.signum
        report = watcher.report(script, outcome.error)
        if signum is not None:
            report = replace(report, interrupted=signal_name(signum))
        if crash_dump is not None:
            crash_dump.finish()
        shown = ()
        if signum is None and trial_steps > 0 and confirm != "never" and report.problems:
            # Written before the reruns too (a signal then still leaves a report); the
            # TensorBoard events only once, as its files are appended to, never replaced.
            write_outputs(report, report_path, html_path)
            run_seconds = time.monotonic() - started
            shown = report.problems
            confirmed = confirm_fixes(
                report,
                script,
                args,
                run_seconds,
                confirm,
                trial_steps,
                stopped=lambda: interrupts.signum is not None,
                listing=listing,
            )
            # The reruns that ended before the signal judged; one it stopped judges
            # nothing (`fix_confirmation`), and none starts after it.
            report = confirmed
            if interrupts.signum is not None:
                report = replace(report, interrupted=signal_name(interrupts.signum))
        render_report(report, problems_shown=True, shown=shown)
        write_outputs(report, report_path, html_path, tensorboard_dir)
    signum = signum or interrupts.signum  # one that came while the reports were written
    if signum is not None:
        return EXIT_SIGNAL_BASE + signum
    if outcome.exit_code:
        return outcome.exit_code
    return EXIT_PROBLEM if report.status == "problem" else EXIT_HEALTHY
