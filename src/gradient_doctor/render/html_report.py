"""The HTML report: one self-contained page (inline CSS and SVG) that opens offline."""

from __future__ import annotations

import os
from collections.abc import Sequence
from html import escape

from gradient_doctor.core.findings import Disconnected, Finding, Fix, NotFix, Origin
from gradient_doctor.core.knowledge.wording import format_number, line_ref, listing
from gradient_doctor.core.report import Report
from gradient_doctor.core.run_series import Series
from gradient_doctor.render.atomic_file import write_text_atomically
from gradient_doctor.render.diff_lines import diff_line_kind
from gradient_doctor.render.svg_plot import Marker, line_plot
from gradient_doctor.render.text import (
    finding_title,
    header_line,
    headroom_text,
    min_max,
    untried_note,
)

# Beyond this many variables a disconnected finding names the first ones and counts the rest
# (the JSON report has them all).
VARIABLES_LISTED = 40
# Sample input values shown per input of the origin op.
VALUES_SHOWN = 8
# In the <head> of every page the doctor writes: how `run --html` recognises an earlier
# report it may overwrite (it never overwrites a page it did not write).
GENERATOR_META = '<meta name="generator" content="gradient-doctor/report/v1">'

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b1b1b;
       max-width: 960px; margin: 24px auto; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 19px; border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 32px; }
h3 { font-size: 17px; margin: 0 0 8px; }
h4 { font-size: 15px; margin: 14px 0 4px; }
.status { display: inline-block; padding: 2px 10px; border-radius: 10px; color: #fff;
          font-weight: 600; }
.status-healthy { background: #2e7d32; }
.status-problem { background: #c62828; }
.status-interrupted { background: #ef6c00; }
.summary { color: #444; margin: 8px 0; }
.script-error { color: #c62828; font-family: ui-monospace, monospace; }
.finding { border: 1px solid #ddd; border-left: 6px solid #c62828; border-radius: 4px;
           padding: 12px 16px; margin: 14px 0; background: #fff; }
.finding.warning { border-left-color: #ef8f00; }
.category { font-family: ui-monospace, monospace; }
.phase { font-size: 13px; color: #555; font-weight: normal; margin-left: 8px; }
dl.origin { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 6px 0; }
dl.origin dt { color: #555; }
dl.origin dd { margin: 0; font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
pre { background: #f6f8fa; border: 1px solid #e3e6ea; border-radius: 4px; padding: 8px 10px;
      overflow-x: auto; margin: 6px 0; font-size: 13px; }
pre.source { background: #fff8e1; border-color: #f2d48b; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
table.tensors { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
table.tensors th, table.tensors td { border: 1px solid #e3e6ea; padding: 2px 8px;
                                     text-align: right; }
table.tensors th { background: #f6f8fa; }
table.tensors td.role, table.tensors td.dtype { text-align: left; }
.explanation { margin: 10px 0; }
.headroom { font-weight: 600; }
.verdict { font-size: 12px; padding: 1px 7px; border-radius: 8px; margin-left: 6px; }
.verdict-yes { background: #e8f5e9; color: #1b5e20; }
.verdict-no { background: #ffebee; color: #b71c1c; }
.verdict-unknown { background: #eceff1; color: #37474f; }
.evidence { color: #444; font-size: 13px; }
.family { color: #555; font-size: 13px; }
pre.patch .diff-added { color: #1b5e20; background: #e8f5e9; }
pre.patch .diff-removed { color: #b71c1c; background: #ffebee; }
pre.patch .diff-header { color: #555; font-weight: 600; }
pre.patch .diff-hunk { color: #6a1b9a; }
figure { margin: 12px 0 20px; }
svg.plot { max-width: 100%; height: auto; background: #fff; border: 1px solid #e3e6ea; }
figcaption { font-weight: 600; margin-bottom: 4px; overflow-wrap: anywhere; }
svg .frame { fill: none; stroke: #999; }
svg .grid { stroke: #eee; }
svg .tick, svg .axis-name, svg .legend-label { font-size: 11px; fill: #555; }
svg .series-line { stroke-width: 1.6; }
svg .limit-line { stroke: #d62728; stroke-width: 1.5; stroke-dasharray: 6 4; }
svg .limit-label { font-size: 11px; fill: #d62728; }
svg .marker { stroke-width: 1.3; }
svg .marker-problem { stroke: #c62828; }
svg .marker-warning { stroke: #ef8f00; stroke-dasharray: 4 3; }
svg .marker-forecast { stroke: #ef8f00; stroke-dasharray: 1 3; }
svg .marker-label { font-size: 11px; }
svg .marker-problem-label { fill: #c62828; }
svg .marker-warning-label, svg .marker-forecast-label { fill: #b26a00; }
.none { color: #555; }
"""


def render_html(report: Report) -> str:
    """Write the whole report as one HTML page that needs nothing else to display.

    Every text from the run (the user's code lines, op and layer names, messages)
    is escaped; the plots are inline SVG drawn here; there are no scripts and no
    links to fetch.

    Args:
        report: Report, the outcome of a watched run (with or without series).

    Returns:
        The page's text: status and script, each problem, each warning with its
        forecast, and one plot per group of series with problems and warnings marked.
    """
    title = f"gradient-doctor: {report.script or 'report'}"
    body = [
        _header(report),
        _findings_section("Problems", "problems", report.problems, "problem"),
        _findings_section("Warnings", "warnings", report.warnings, "warning"),
        _plots_section(report),
    ]
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">{GENERATOR_META}'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>\n"
        "<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_html_report(report: Report, path: str | os.PathLike[str]) -> None:
    """Write `render_html(report)` to `path`, atomically, creating its folder if needed.

    Raises:
        OSError: when the folder cannot be created or the file cannot be written.
    """
    write_text_atomically(path, render_html(report))


def _header(report: Report) -> str:
    status = escape(report.status)
    parts = [
        "<header>",
        f"<h1>gradient-doctor report: {escape(report.script or '(no script)')}</h1>",
        f'<p><span class="status status-{status}">{status}</span></p>',
        f'<p class="summary">{escape(header_line(report))}</p>',
    ]
    if report.script_error is not None:
        parts.append(
            f'<p class="script-error">the script raised: {escape(report.script_error)}</p>'
        )
    parts.append("</header>")
    return "\n".join(parts)


def _findings_section(heading: str, anchor: str, findings: Sequence[Finding], kind: str) -> str:
    if not findings:
        return f'<section id="{anchor}"><h2>{heading}</h2><p class="none">none</p></section>'
    articles = [finding_html(finding, kind) for finding in findings]
    return f'<section id="{anchor}"><h2>{heading}</h2>\n' + "\n".join(articles) + "</section>"


def finding_html(finding: Finding, kind: str = "problem") -> str:
    """One problem or warning as an `<article>`: where, the values, why, and what to do.

    Args:
        finding: Finding.
        kind: str, "problem" or "warning" (a warning also shows its headroom and
            forecast). Defaults to "problem".

    Returns:
        The article's HTML, every text escaped.
    """
    phase = f'<span class="phase">{escape(finding.phase)} pass</span>' if finding.phase else ""
    parts = [
        f'<article class="finding {kind}">',
        f'<h3><span class="category">{escape(finding_title(finding))}</span>{phase}</h3>',
    ]
    if kind == "warning":
        parts.append(_forecast_html(finding))
    if finding.origin is not None:
        parts.append(origin_html(finding.origin))
    if finding.disconnected is not None:
        parts.append(_disconnected_html(finding.disconnected))
    parts.append(f'<p class="explanation">{escape(finding.explanation)}</p>')
    parts.append(_not_fixes_html(finding.not_fixes))
    parts.append(_fixes_html(finding.fixes))
    parts.append("</article>")
    return "\n".join(part for part in parts if part)


def _forecast_html(finding: Finding) -> str:
    closeness = [headroom_text(finding.headroom)] if finding.headroom else []
    if finding.forecast_step is not None:
        closeness.append(f"limit expected near step {finding.forecast_step}")
    if not closeness:
        return ""
    return f'<p class="headroom">{escape(", ".join(closeness))}</p>'


def origin_html(origin: Origin) -> str:
    """The op, its layer and the user's line, then a table of its input and output values."""
    rows = [("op", origin.reported_op)]
    if origin.gradient_of:
        rows.append(("gradient of", origin.reported_gradient_of))
    rows += [("name", origin.op_name), ("layer", origin.layer or "(none)")]
    if origin.source is not None:
        rows.append(("where", line_ref(origin.source)))
    parts = [
        '<dl class="origin">'
        + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows)
        + "</dl>"
    ]
    if origin.source is not None:
        code = f"-> {line_ref(origin.source)}   {origin.source.code.strip()}"
        parts.append(f'<pre class="source"><code>{escape(code)}</code></pre>')
    if origin.inputs or origin.outputs:
        parts.append(_tensors_table(origin))
    return "\n".join(parts)


def _tensors_table(origin: Origin) -> str:
    with_values = any(origin.input_values)
    head = (
        "<tr><th>tensor</th><th>dtype</th><th>shape</th><th>range (finite)</th>"
        "<th>nan</th><th>inf</th><th>zeros</th>"
        + ("<th>some values</th>" if with_values else "")
        + "</tr>"
    )
    rows = []
    tensors = [("input", i, s) for i, s in enumerate(origin.inputs)]
    tensors += [("output", i, s) for i, s in enumerate(origin.outputs)]
    for role, index, stats in tensors:
        shape = ", ".join("?" if d is None else str(d) for d in stats.shape)
        sample = ()
        if role == "input" and index < len(origin.input_values):
            sample = origin.input_values[index][:VALUES_SHOWN]
        cells = [
            f"{role} {index}",
            stats.dtype,
            f"[{shape}]",
            min_max(stats),
            str(stats.nan),
            str(stats.inf),
            str(stats.zeros),
        ]
        if with_values:
            cells.append(", ".join(format_number(v) for v in sample))
        rows.append(
            f'<tr><td class="role">{escape(cells[0])}</td>'
            f'<td class="dtype">{escape(cells[1])}</td>'
            + "".join(f"<td>{escape(cell)}</td>" for cell in cells[2:])
            + "</tr>"
        )
    return f'<table class="tensors">{head}{"".join(rows)}</table>'


def _disconnected_html(disconnected: Disconnected) -> str:
    variables = disconnected.variables
    amount = f"all {len(variables)}" if disconnected.all else str(len(variables))
    names = listing(variables, VARIABLES_LISTED)
    parts = [
        f"<p>No gradient reaches {escape(amount)} trained variables: <code>"
        f"{escape(names)}</code></p>"
    ]
    point = disconnected.break_point
    if point is not None:
        parts.append(f"<p>The path from the loss breaks at <code>{escape(point.op)}</code>.</p>")
        if point.source is not None:
            code = f"-> {line_ref(point.source)}   {point.source.code.strip()}"
            parts.append(f'<pre class="source"><code>{escape(code)}</code></pre>')
    return "\n".join(parts)


def _not_fixes_html(not_fixes: Sequence[NotFix]) -> str:
    if not not_fixes:
        return ""
    items = []
    for item in not_fixes:
        evidence = getattr(item, "evidence", None)
        extra = f' <span class="evidence">({escape(evidence)})</span>' if evidence else ""
        extra += escape(untried_note(item))
        items.append(f"<li><code>{escape(item.remedy)}</code>: {escape(item.why)}{extra}</li>")
    return "<h4>Will not help</h4><ul>" + "".join(items) + "</ul>"


def _fixes_html(fixes: Sequence[Fix]) -> str:
    if not fixes:
        return ""
    return "<h4>Try</h4><ol>" + "".join(fix_html(fix) for fix in fixes) + "</ol>"


def fix_html(fix: Fix) -> str:
    """One proposed fix: title, family, whether a replay verified it, and its code."""
    verdict = {True: ("yes", "verified"), False: ("no", "not verified"), None: None}[fix.verified]
    badge = f'<span class="verdict verdict-{verdict[0]}">{verdict[1]}</span>' if verdict else ""
    evidence = f'<div class="evidence">{escape(fix.evidence)}</div>' if fix.evidence else ""
    patch = f'<pre class="patch">{_diff_html(fix.patch)}</pre>' if fix.patch else ""
    return (
        f"<li><strong>{escape(fix.title)}</strong> "
        f'<span class="family">[{escape(fix.family)}]</span>{badge}{evidence}'
        f"<pre><code>{escape(fix.code.strip(chr(10)))}</code></pre>{patch}</li>"
    )


def _diff_html(patch: str) -> str:
    """A unified diff, its added and removed lines marked for colour."""
    lines = []
    for line in patch.splitlines():
        kind = diff_line_kind(line)
        text = escape(line)
        lines.append(f'<span class="diff-{kind}">{text}</span>' if kind else text)
    return "\n".join(lines)


def _plots_section(report: Report) -> str:
    if not report.series:
        return (
            '<section id="plots"><h2>Over the run</h2>'
            '<p class="none">no series recorded</p></section>'
        )
    figures = [
        f"<figure><figcaption>{escape(group)}</figcaption>"
        f"{line_plot(group, members, plot_markers(report, members))}</figure>"
        for group, members in group_series(report.series)
    ]
    return '<section id="plots"><h2>Over the run</h2>\n' + "\n".join(figures) + "</section>"


def group_series(series: Sequence[Series]) -> list[tuple[str, list[Series]]]:
    """The series by `group`, groups in the order first seen."""
    groups: dict[str, list[Series]] = {}
    for one in series:
        groups.setdefault(one.group, []).append(one)
    return list(groups.items())


def plot_markers(report: Report, members: Sequence[Series]) -> list[Marker]:
    """The steps to mark on one plot.

    Every problem is marked on every plot. A warning about an op or layer that some
    plot measures (its origin's `op_name` or `layer` is a series' `about`) is marked
    on those plots, with its forecast; any other warning is marked on every plot.
    """
    markers = [
        Marker(finding.step, finding_title(finding), "problem")
        for finding in report.problems
        if finding.step is not None
    ]
    subjects = {one.about for one in report.series if one.about is not None}
    here = {one.about for one in members if one.about is not None}
    for finding in report.warnings:
        about = _subjects(finding)
        if finding.step is None or (about & subjects and not about & here):
            continue
        markers.append(Marker(finding.step, f"warning: {finding_title(finding)}", "warning"))
        if finding.forecast_step is not None and about & here:
            label = f"limit forecast at step {finding.forecast_step}"
            markers.append(Marker(finding.forecast_step, label, "forecast"))
    return markers


def _subjects(finding: Finding) -> set[str]:
    origin = finding.origin
    if origin is None:
        return set()
    return {name for name in (origin.op_name, origin.layer) if name}
