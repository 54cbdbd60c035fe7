"""The JSON report: a serialisation of `Report` to schema `gradient-doctor/report/v1`."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from gradient_doctor.core.findings import (
    Disconnected,
    Finding,
    Fix,
    Headroom,
    NotFix,
    Origin,
    SourceLine,
    TensorStats,
)
from gradient_doctor.core.report import SCHEMA, Report
from gradient_doctor.core.run_series import Series
from gradient_doctor.render.atomic_file import write_text_atomically


def report_to_dict(report: Report) -> dict[str, Any]:
    """Serialise a report to the plain dict of schema `gradient-doctor/report/v1`.

    Every value in the result is a JSON-safe built-in (str, int, float, bool, None,
    list, dict): numbers that arrive as NumPy scalars become Python numbers, and
    floats that are NaN or infinite become None (`null`). A tensor's `min`/`max` are
    taken over its finite values, so they are null only when it holds none; the
    `nan`/`inf` counts always tell how many non-finite values there were.

    Args:
        report: Report, the outcome of a watched run.

    Returns:
        A dict with the keys `schema`, `framework`, `status`, `script`, `steps_watched`,
        `problems` and `warnings`, plus `script_error` only when the script raised
        a non-numeric exception, `interrupted` (the signal's name) only when a signal
        stopped the run, `optimizers` only when the adapter counted them, `scaler_skipped`
        only when a loss scaler skipped updates itself, `failures_counted` only when
        --keep-going counted failing steps it did not diagnose, and `series` only when the report
        carries series.

    Example:
        >>> report_to_dict(Report(script="train.py", steps_watched=3))["status"]
        'healthy'
    """
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "framework": report.framework,
        "status": report.status,
        "script": report.script,
        "steps_watched": int(report.steps_watched),
        "problems": [problem_to_dict(finding) for finding in report.problems],
        "warnings": [warning_to_dict(finding) for finding in report.warnings],
    }
    if report.script_error is not None:
        result["script_error"] = report.script_error
    if report.interrupted is not None:
        result["interrupted"] = report.interrupted
    if report.optimizers is not None:
        result["optimizers"] = report.optimizers
    if report.scaler_skipped:
        result["scaler_skipped"] = int(report.scaler_skipped)
    if report.failures_counted:
        result["failures_counted"] = int(report.failures_counted)
    if report.series:
        result["series"] = [series_to_dict(series) for series in report.series]
    return result


def write_json_report(report: Report, path: str | os.PathLike[str]) -> None:
    """Write the report as JSON to `path`, atomically, creating its folder if needed.

    The text goes to a temporary file beside `path` that then replaces it, so a
    reader never sees half a report, even when the run is killed while writing.

    Args:
        report: Report, the outcome of a watched run.
        path: str or path-like, where the JSON file goes.

    Raises:
        OSError: when the folder cannot be created or the file cannot be written.
    """
    text = json.dumps(report_to_dict(report), indent=2, ensure_ascii=False, allow_nan=False)
    write_text_atomically(path, text + "\n")


def problem_to_dict(finding: Finding) -> dict[str, Any]:
    """Serialise one finding as an entry of the report's `problems` list.

    Args:
        finding: Finding, a diagnosed problem.

    Returns:
        A dict with the keys `category`, `step`, `replica`, `worker`, `phase`, `origin`,
        `disconnected`, `explanation`, `skipped_updates`, `own_update`, `not_fixes` and
        `fixes`.
    """
    return {
        "category": finding.category,
        "step": _integer(finding.step),
        "replica": _integer(finding.replica),
        "worker": _worker(finding.worker),
        "phase": finding.phase,
        "origin": origin_to_dict(finding.origin),
        "disconnected": disconnected_to_dict(finding.disconnected),
        "explanation": finding.explanation,
        "skipped_updates": finding.skipped_updates,
        "own_update": finding.own_update,
        "not_fixes": [not_fix_to_dict(not_fix) for not_fix in finding.not_fixes],
        "fixes": [fix_to_dict(fix) for fix in finding.fixes],
    }


def _worker(task: tuple[str, int] | None) -> dict[str, Any] | None:
    """A cluster task as TF_CONFIG writes it: {"type": "worker", "index": 1}, or None."""
    return None if task is None else {"type": task[0], "index": int(task[1])}


def warning_to_dict(finding: Finding) -> dict[str, Any]:
    """Serialise one finding as an entry of the report's `warnings` list.

    Args:
        finding: Finding, an early warning raised while the run was still finite.

    Returns:
        The keys of `problem_to_dict` plus `forecast_step` and `headroom`.
    """
    return {
        **problem_to_dict(finding),
        "forecast_step": _integer(finding.forecast_step),
        "headroom": headroom_to_dict(finding.headroom),
    }


def origin_to_dict(origin: Origin | None) -> dict[str, Any] | None:
    """Serialise the op that first produced a non-finite value, or None.

    Args:
        origin: Origin or None.

    Returns:
        A dict with `op`, `op_name`, `layer`, `file`, `line`, `code` (the user's
        source line, flattened; null when unknown), `end_line` (the last line of a
        statement over several lines, else null), `source_kind` (what that line is:
        "op", "layer_creation", "state_write", "optimizer_creation" or
        "input_pipeline"), `variable`,
        `gradient_of`,
        `inputs` and `outputs`; None when `origin` is None.
    """
    if origin is None:
        return None
    return {
        "op": origin.reported_op,
        "op_name": origin.op_name,
        "layer": origin.layer,
        **source_to_dict(origin.source),
        "end_line": None if origin.source is None else _integer(origin.source.end_line),
        "source_kind": origin.source_kind,
        "variable": origin.variable,
        "gradient_of": origin.reported_gradient_of,
        "inputs": [tensor_stats_to_dict(stats) for stats in origin.inputs],
        "outputs": [tensor_stats_to_dict(stats) for stats in origin.outputs],
    }


def source_to_dict(source: SourceLine | None) -> dict[str, Any]:
    """Flatten a user's source line into `file`, `line` and `code` (all None when unknown).

    Args:
        source: SourceLine or None.

    Returns:
        A dict with exactly the keys `file`, `line` and `code`.
    """
    if source is None:
        return {"file": None, "line": None, "code": None}
    return {"file": source.file, "line": _integer(source.line), "code": source.code}


def tensor_stats_to_dict(stats: TensorStats) -> dict[str, Any]:
    """Serialise a tensor summary to the keys the schema names.

    Args:
        stats: TensorStats.

    Returns:
        A dict with `dtype`, `shape` (a list; unknown dimensions are None), `min`
        and `max` (None when not finite), and the counts `nan`, `inf` and `zeros`.
    """
    return {
        "dtype": stats.dtype,
        "shape": [_integer(dimension) for dimension in stats.shape],
        "min": _finite_float(stats.min),
        "max": _finite_float(stats.max),
        "nan": int(stats.nan),
        "inf": int(stats.inf),
        "zeros": int(stats.zeros),
    }


def disconnected_to_dict(disconnected: Disconnected | None) -> dict[str, Any] | None:
    """Serialise the variables that got no gradient and where the path broke, or None.

    Args:
        disconnected: Disconnected or None.

    Returns:
        A dict with `variables`, `all` and `break` (`{op, file, line, code}`, or
        None when no break point was found); None when `disconnected` is None.
    """
    if disconnected is None:
        return None
    point = disconnected.break_point
    return {
        "variables": list(disconnected.variables),
        "all": bool(disconnected.all),
        "break": None if point is None else {"op": point.op, **source_to_dict(point.source)},
    }


def not_fix_to_dict(not_fix: NotFix) -> dict[str, Any]:
    """Serialise a remedy that will not help: `{remedy, why, evidence, structural,
    patch}`, `patch` the one its trial or rerun ran (None when it has none)."""
    return {
        "remedy": not_fix.remedy,
        "why": not_fix.why,
        "evidence": not_fix.evidence,
        "structural": not_fix.structural,
        "patch": not_fix.fix.patch if not_fix.fix is not None else None,
    }


def fix_to_dict(fix: Fix) -> dict[str, Any]:
    """Serialise a proposed fix: `{family, title, code, patch, verified, evidence}`."""
    return {
        "family": fix.family,
        "title": fix.title,
        "code": fix.code,
        "patch": fix.patch,
        "verified": None if fix.verified is None else bool(fix.verified),
        "evidence": fix.evidence,
    }


def headroom_to_dict(headroom: Headroom | None) -> dict[str, Any] | None:
    """Serialise a headroom as `{limit, value}` (non-finite numbers as None), or None."""
    if headroom is None:
        return None
    return {"limit": _finite_float(headroom.limit), "value": _finite_float(headroom.value)}


def series_to_dict(series: Series) -> dict[str, Any]:
    """Serialise one watched series (a few hundred points at most).

    Args:
        series: Series.

    Returns:
        A dict with `name`, `title`, `group`, `unit`, `scale`, `limit` (None when
        the series has none), `about`, and the parallel lists `steps` and `values`.
    """
    return {
        "name": series.name,
        "title": series.title,
        "group": series.group,
        "unit": series.unit,
        "scale": series.scale,
        "limit": _finite_float(series.limit),
        "about": series.about,
        "steps": [int(step) for step in series.steps],
        "values": [_finite_float(value) for value in series.values],
    }


def _finite_float(value: float | None) -> float | None:
    # JSON has no NaN or infinity; the counts beside these numbers carry that news.
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _integer(value: int | None) -> int | None:
    # Steps, lines and dimensions may arrive as NumPy integers, which json rejects.
    return None if value is None else int(value)
