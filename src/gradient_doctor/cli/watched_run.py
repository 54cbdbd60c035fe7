"""Run one script with the TensorFlow adapter installed and produce the report."""

from __future__ import annotations

from gradient_doctor.cli.script_runner import run_script

EXIT_HEALTHY, EXIT_PROBLEM = 0, 1


def watched_run(script: str, args: list[str], report_path: str | None, keep_going: bool) -> int:
    """Watch `script`, print the diagnosis, write the JSON report; return the exit status."""
    from gradient_doctor.render.json_report import write_json_report
    from gradient_doctor.render.terminal import render_report
    from gradient_doctor.tf_adapter.run_patches import RunPatches
    from gradient_doctor.tf_adapter.watcher import Watcher, print_finding, print_warning

    watcher = Watcher(
        stop_on_problem=not keep_going, on_finding=print_finding, on_warning=print_warning
    )
    patches = RunPatches(watcher)
    patches.install()
    try:
        outcome = run_script(script, args)
        watcher.finish()
    finally:
        patches.uninstall()
    report = watcher.report(script, outcome.error)
    render_report(report, problems_shown=True)
    if report_path:
        write_json_report(report, report_path)
    return EXIT_PROBLEM if report.status == "problem" else EXIT_HEALTHY
