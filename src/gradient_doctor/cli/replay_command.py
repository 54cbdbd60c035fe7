"""`gradient-doctor replay DIR`: diagnose a crash dump's step again and compare with the run."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from gradient_doctor.core.findings import Finding

EXIT_HEALTHY, EXIT_PROBLEM = 0, 1
# Each framework's dump reader (its module has `replay_dump(directory) -> DumpReplay`),
# the framework's name in words, and its key in the manifest's `versions`.
READERS = {
    "tensorflow": ("gradient_doctor.tf_adapter.dump.dump_replay", "TensorFlow"),
    "torch": ("gradient_doctor.torch_adapter.dump.dump_replay", "PyTorch"),
}


def replay_command(directory: str, report_path: str | None) -> int:
    """Replay the dump in `directory`, print the diagnosis, write the JSON report.

    Returns:
        1 when the step produced non-finite values again, 0 when it stayed finite.

    Raises:
        DumpError: (a `UsageError`) the dump cannot be read or run.
        UsageError: the framework that wrote the dump is not installed here.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from gradient_doctor.cli.main import check_dump_support, check_framework
    from gradient_doctor.core.dump_folder import DumpError, dump_framework, read_manifest
    from gradient_doctor.core.report import Report
    from gradient_doctor.render.json_report import write_json_report
    from gradient_doctor.render.terminal import render_finding, render_report

    framework = dump_framework(read_manifest(directory))
    if framework not in READERS:
        raise DumpError(
            f"cannot replay {directory!r}: it was dumped from {framework!r}, and this "
            f"gradient-doctor replays {' and '.join(READERS)} dumps only."
        )
    check_framework(framework)
    check_dump_support(framework)
    reader, _ = READERS[framework]
    outcome = importlib.import_module(reader).replay_dump(directory)
    manifest = outcome.manifest
    print(intro_line(directory, manifest), file=sys.stderr)
    problems = (outcome.finding,) if outcome.reproduced else ()
    report = Report(
        script=manifest.get("script"), steps_watched=1, problems=problems, framework=framework
    )
    if outcome.reproduced:
        render_finding(outcome.finding)
    render_report(report, problems_shown=outcome.reproduced)
    if outcome.stopped:
        print(f"The replay ran only part of the step: {outcome.stopped}.", file=sys.stderr)
    print(
        comparison_line(
            outcome.dumped_finding,
            outcome.finding,
            outcome.reproduced,
            framework=READERS[framework][1],
            whole=outcome.stopped is None,
        ),
        file=sys.stderr,
    )
    if report_path:
        write_json_report(report, report_path)
    return EXIT_PROBLEM if outcome.reproduced else EXIT_HEALTHY


def intro_line(directory: str, manifest: dict[str, Any]) -> str:
    """Say what is replayed: "replaying step 1174 of train.py from DIR (dumped by
    gradient-doctor 0.1.0 with TensorFlow 2.21.0)", or "with PyTorch 2.13.0"."""
    from gradient_doctor.core.dump_folder import dump_framework

    framework = dump_framework(manifest)
    name = READERS.get(framework, (None, framework))[1]
    versions = manifest.get("versions") or {}
    script = manifest.get("script")
    of_script = f" of {script}" if script else ""
    return (
        f"gradient-doctor: replaying step {manifest.get('step')}{of_script} from {directory} "
        f"(dumped by gradient-doctor {versions.get('gradient_doctor', '?')} with {name} "
        f"{versions.get(framework, '?')})"
    )


def comparison_line(
    dumped: dict[str, Any],
    finding: Finding,
    reproduced: bool,
    framework: str = "TensorFlow",
    whole: bool = True,
) -> str:
    """Say whether the replay found what the run found, naming op and line of both.

    Args:
        dumped: the run's finding, as the dump's manifest holds it.
        finding: the replay's diagnosis.
        reproduced: the replay made non-finite values again.
        framework: the framework's name in words ("TensorFlow", "PyTorch").
        whole: the replay ran every op of the step (False: it stopped early).
    """
    run_says = _place(
        dumped.get("category"), (dumped.get("origin") or {}).get("op"), dumped.get("origin") or {}
    )
    if not reproduced and not whole:
        return (
            "The part of the step the replay ran stayed finite: the problem did not "
            f"reproduce from this dump (the run found {run_says})."
        )
    if not reproduced:
        return (
            "The replayed step stayed finite: the problem did not reproduce from this dump "
            f"(the run found {run_says}). Its cause may lie outside the step: a random draw "
            f"the dump could not restore, or a different {framework} build or device."
        )
    origin = finding.origin
    source = origin.source if origin is not None else None
    replay_origin = {
        "op": origin.reported_op if origin else None,
        "file": source.file if source else None,
        "line": source.line if source else None,
    }
    replay_says = _place(finding.category, replay_origin["op"], replay_origin)
    run_origin = dumped.get("origin") or {}
    same = finding.category == dumped.get("category") and all(
        run_origin.get(key) == replay_origin[key] for key in ("op", "file", "line")
    )
    if not same:
        return f"Reproduced, but the replay finds {replay_says} where the run found {run_says}."
    differs = _first_difference(run_origin.get("inputs") or [], origin.inputs)
    if differs is None:
        return f"Reproduced: the replay finds what the run found, {replay_says}."
    return (
        f"Reproduced: the replay finds what the run found, {replay_says}, but from other "
        f"values: {differs}. A random draw the dump could not restore, or a different "
        f"{framework} build or device, computed them."
    )


# Summaries of the same values, computed by another build or device, may differ in their
# last digits; past this relative difference they are other values.
_SAME_VALUES = 1e-3


def _first_difference(run_inputs: list[dict], replay_inputs) -> str | None:
    """The first input summary of the origin that the replay did not compute as the run
    did (its min, max, or count of NaN and inf), in words; None when all agree."""
    for number, (run, replay) in enumerate(zip(run_inputs, replay_inputs)):
        for field in ("min", "max", "nan", "inf"):
            was, now = run.get(field), getattr(replay, field)
            if was is None or now is None:
                if was is not now:
                    return f"input {number}'s {field} was {was} in the run, {now} in the replay"
                continue
            if abs(was - now) > _SAME_VALUES * max(abs(was), abs(now), 1e-30):
                return f"input {number}'s {field} was {was:.4g} in the run, {now:.4g} in the replay"
    return None


def _place(category, op, origin: dict) -> str:
    where = f" at {origin.get('file')}:{origin.get('line')}" if origin.get("file") else ""
    return f"{category or 'a problem'} ({op or 'no op named'}{where})"
