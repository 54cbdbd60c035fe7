"""`gradient-doctor replay DIR`: diagnose a crash dump's step again and compare with the run."""

from __future__ import annotations

import os
import sys
from typing import Any

from gradient_doctor.core.findings import Finding

EXIT_HEALTHY, EXIT_PROBLEM = 0, 1


def replay_command(directory: str, report_path: str | None) -> int:
    """Replay the dump in `directory`, print the diagnosis, write the JSON report.

    Returns:
        1 when the step produced non-finite values again, 0 when it stayed finite.

    Raises:
        DumpError: (a `UsageError`) the dump cannot be read or run.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from gradient_doctor.core.report import Report
    from gradient_doctor.render.json_report import write_json_report
    from gradient_doctor.render.terminal import render_finding, render_report
    from gradient_doctor.tf_adapter.dump.dump_replay import replay_dump

    outcome = replay_dump(directory)
    manifest = outcome.manifest
    print(intro_line(directory, manifest), file=sys.stderr)
    problems = (outcome.finding,) if outcome.reproduced else ()
    report = Report(script=manifest.get("script"), steps_watched=1, problems=problems)
    if outcome.reproduced:
        render_finding(outcome.finding)
    render_report(report, problems_shown=outcome.reproduced)
    print(
        comparison_line(outcome.dumped_finding, outcome.finding, outcome.reproduced),
        file=sys.stderr,
    )
    if report_path:
        write_json_report(report, report_path)
    return EXIT_PROBLEM if outcome.reproduced else EXIT_HEALTHY


def intro_line(directory: str, manifest: dict[str, Any]) -> str:
    """Say what is replayed: "replaying step 1174 of train.py from DIR (TensorFlow 2.21.0)"."""
    versions = manifest.get("versions") or {}
    script = manifest.get("script")
    of_script = f" of {script}" if script else ""
    return (
        f"gradient-doctor: replaying step {manifest.get('step')}{of_script} from {directory} "
        f"(dumped by gradient-doctor {versions.get('gradient_doctor', '?')} with TensorFlow "
        f"{versions.get('tensorflow', '?')})"
    )


def comparison_line(dumped: dict[str, Any], finding: Finding, reproduced: bool) -> str:
    """Say whether the replay found what the run found, naming op and line of both."""
    run_says = _place(
        dumped.get("category"), (dumped.get("origin") or {}).get("op"), dumped.get("origin") or {}
    )
    if not reproduced:
        return (
            "The replayed step stayed finite: the problem did not reproduce from this dump "
            f"(the run found {run_says}). Its cause may lie outside the step: a random draw "
            "the dump could not restore, or a different TensorFlow build or device."
        )
    origin = finding.origin
    source = origin.source if origin is not None else None
    replay_origin = {
        "op": origin.op if origin else None,
        "file": source.file if source else None,
        "line": source.line if source else None,
    }
    replay_says = _place(finding.category, replay_origin["op"], replay_origin)
    run_origin = dumped.get("origin") or {}
    same = finding.category == dumped.get("category") and all(
        run_origin.get(key) == replay_origin[key] for key in ("op", "file", "line")
    )
    if same:
        return f"Reproduced: the replay finds what the run found, {replay_says}."
    return f"Reproduced, but the replay finds {replay_says} where the run found {run_says}."


def _place(category, op, origin: dict) -> str:
    where = f" at {origin.get('file')}:{origin.get('line')}" if origin.get("file") else ""
    return f"{category or 'a problem'} ({op or 'no op named'}{where})"
