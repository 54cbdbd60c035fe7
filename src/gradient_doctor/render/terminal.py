"""The terminal report: a one-screen diagnosis drawn with rich, built from pure text functions."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

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
from gradient_doctor.core.knowledge.wording import at_step, count, format_number, listing, op_place
from gradient_doctor.core.report import Report
from gradient_doctor.render.diff_lines import diff_line_kind

NOT_FIXES_HEADING = "Will not help:"
FIXES_HEADING = "Try:"
# Said above a fix's patch: how to apply it, from the folder the script was run in.
PATCH_HEADING = "patch (apply with `patch -p1` in the folder you ran from):"
WARNINGS_HEADING = "Warnings:"

# Ops such as AddN or Concat may read dozens of tensors; the first few tell the story
# and the rest would push the fix off the screen.
MAX_TENSORS_SHOWN = 4

# Fix code starts under the fix's title, after "  1. ".
CODE_INDENT = 5
# Fixes shown with their code; the rest are named (the JSON report has all the code).
FIXES_WITH_CODE = 3
# Beyond this many variables the terminal counts layers instead of naming variables.
NAMES_LISTED = 5

STATUS_STYLES = {"healthy": "bold green", "interrupted": "bold yellow", "problem": "bold red"}

# Styles keyed by how a line's text begins (after its indent), so the plain text
# stays the one source of truth.
LINE_STYLES = (
    ("-> ", "bold yellow"),
    ("op: ", "bold"),
    (NOT_FIXES_HEADING, "bold"),
    (FIXES_HEADING, "bold"),
)


def header_line(report: Report) -> str:
    """Summarise a report in one line: its status, script and steps watched.

    Args:
        report: Report, the outcome of a watched run.

    Returns:
        "healthy: 1234 steps watched, no non-finite values" for a healthy run,
        "interrupted by SIGTERM: train.py, 37 steps watched, nothing found before the
        signal" for a run a signal stopped, else e.g. "problem: train.py, 1831 steps
        watched, 1 problem, 2 warnings" (", interrupted by SIGTERM" when it was).
    """
    watched = f"{count(report.steps_watched, 'step')} watched"
    if report.status == "healthy":
        return f"healthy: {watched}, no non-finite values"
    interrupted = report.status == "interrupted"
    found = "nothing found before the signal" if interrupted else None
    parts = [report.script, watched, found or count(len(report.problems), "problem")]
    if report.warnings:
        parts.append(count(len(report.warnings), "warning"))
    if report.interrupted and not interrupted:
        parts.append(f"interrupted by {report.interrupted}")
    label = f"interrupted by {report.interrupted}" if interrupted else "problem"
    return f"{label}: " + ", ".join(part for part in parts if part)


def finding_title(finding: Finding) -> str:
    """Name a finding by its category and step: "forward_overflow at step 1830"."""
    return f"{finding.category}{at_step(finding.step)}"


def format_finding_lines(finding: Finding) -> list[str]:
    """Write a whole finding as plain text lines, fix code included.

    Args:
        finding: Finding, a diagnosed problem or a warning.

    Returns:
        The title, then the lines of `diagnosis_lines`, then "Try:" with each fix's
        heading and its code indented beneath it.

    Example:
        >>> format_finding_lines(finding)[:3]
        ['forward_overflow at step 1830', 'phase: forward', 'op: Exp  name: ...']
    """
    lines = [finding_title(finding), *diagnosis_lines(finding)]
    if finding.fixes:
        lines.append(FIXES_HEADING)
    for number, fix in enumerate(finding.fixes[:FIXES_WITH_CODE], start=1):
        lines += fix_heading_lines(number, fix)
        lines += [" " * CODE_INDENT + line for line in fix.code.strip("\n").splitlines()]
        lines += [" " * CODE_INDENT + line for line in patch_lines(fix)]
    lines += more_fixes_lines(finding)
    return lines


def patch_lines(fix: Fix) -> list[str]:
    """The fix's patch, under a line that says how to apply it (none without a patch)."""
    if not fix.patch:
        return []
    return [PATCH_HEADING, *fix.patch.rstrip("\n").splitlines()]


def more_fixes_lines(finding: Finding) -> list[str]:
    """Name the fixes beyond the first few, whose code only the JSON report carries."""
    rest = finding.fixes[FIXES_WITH_CODE:]
    if not rest:
        return []
    return [
        f"  also: {', '.join(f'{fix.title} [{fix.family}]' for fix in rest)} (code in the JSON)"
    ]


def diagnosis_lines(finding: Finding) -> list[str]:
    """Write everything about a finding that comes before its fixes.

    Args:
        finding: Finding.

    Returns:
        The phase, the origin op with the user's line and the evidence, the
        disconnected variables, the explanation, and the remedies that will not help.
    """
    lines = [] if finding.phase is None else [f"phase: {finding.phase}"]
    if finding.origin is not None:
        lines += origin_lines(finding.origin)
    if finding.disconnected is not None:
        lines += disconnected_lines(finding.disconnected)
    lines.append(finding.explanation)
    lines += skipped_lines(finding)
    lines += not_fix_lines(finding.not_fixes)
    return lines


def skipped_lines(finding: Finding) -> list[str]:
    """Say that the doctor skipped the update(s), so the weights are those before them."""
    if finding.skipped_updates <= 0:
        return []
    what = (
        "its update was skipped"
        if finding.skipped_updates == 1
        else f"{finding.skipped_updates} updates were skipped"
    )
    return [f"The doctor stopped this step before it reached the weights: {what}."]


def origin_lines(origin: Origin) -> list[str]:
    """Describe the op that first went non-finite: type, name, layer, line, evidence.

    Args:
        origin: Origin.

    Returns:
        "op: SqrtGrad (gradient of Sqrt)  name: ...  layer: ...", the user's line
        marked `->` when known, then one line per input and output tensor.
    """
    op = (
        origin.op
        if origin.gradient_of is None
        else f"{origin.op} (gradient of {origin.gradient_of})"
    )
    parts = [f"op: {op}", f"name: {origin.op_name}"]
    if origin.layer:
        parts.append(f"layer: {origin.layer}")
    if origin.variable:
        parts.append(f"variable: {origin.variable}")
    lines = ["  ".join(parts)]
    if origin.source is not None:
        lines.append(source_line(origin.source))
        lines += source_kind_lines(origin)
    lines += tensor_lines("input", origin.inputs, with_range=True)
    lines += tensor_lines("output", origin.outputs, with_range=False)
    return lines


def source_kind_lines(origin: Origin) -> list[str]:
    """Say what the `->` line is when it is not the line that ran the op.

    Returns:
        For an op Keras ran inside a layer: "     (created layer `dense`, where Keras
        ran MatMul)" (or "which holds `dense/kernel`" when a variable is named); for
        a variable written before the step: "     (wrote `normalization/mean` before
        the step)"; else nothing.
    """
    if origin.source_kind == "layer_creation":
        layer = f"layer `{origin.layer}`" if origin.layer else "the layer"
        if origin.variable:
            return [f"     (created {layer}, which holds `{origin.variable}`)"]
        return [f"     (created {layer}, where Keras ran {origin.op})"]
    if origin.source_kind == "state_write":
        written = f"`{origin.variable}`" if origin.variable else "the variable"
        return [f"     (wrote {written} before the step)"]
    return []


def source_line(source: SourceLine) -> str:
    """Mark the user's own line: "  -> train.py:42   w = tf.exp(scores)"."""
    return f"  -> {source.file}:{source.line}   {source.code.strip()}"


def tensor_lines(role: str, tensors: Sequence[TensorStats], *, with_range: bool) -> list[str]:
    """Describe each tensor an op read or wrote, one line each, at most a few.

    Args:
        role: str, "input" or "output".
        tensors: the tensors' summaries.
        with_range: bool, whether to show the finite min and max (inputs explain a
            failure by their range; outputs by their non-finite counts).

    Returns:
        Lines like "input 0: float32 [32, 8]  min -3.1  max 712.4  nan 0  inf 0  zeros 0",
        then "... and 3 more inputs" when some were left out.
    """
    lines = [
        f"{role} {index}: {tensor_summary(stats, with_range=with_range)}"
        for index, stats in enumerate(tensors[:MAX_TENSORS_SHOWN])
    ]
    hidden = len(tensors) - MAX_TENSORS_SHOWN
    if hidden > 0:
        lines.append(f"... and {count(hidden, role)} more")
    return lines


def tensor_summary(stats: TensorStats, *, with_range: bool) -> str:
    """Summarise one tensor: dtype, shape, optionally its finite range, and its counts.

    Args:
        stats: TensorStats.
        with_range: bool, whether to include the min, max and zero count.

    Returns:
        "float32 [32, 8]  min -3.1  max 712.4  nan 0  inf 0  zeros 0", or without the
        range "float32 [32, 8]  nan 0  inf 17". Unknown dimensions read "?".
    """
    shape = ", ".join("?" if dimension is None else str(dimension) for dimension in stats.shape)
    parts = [f"{stats.dtype} [{shape}]"]
    if with_range:
        parts.append(value_range(stats))
    parts += [f"nan {stats.nan}", f"inf {stats.inf}"]
    if with_range:
        parts.append(f"zeros {stats.zeros}")
    return "  ".join(parts)


def value_range(stats: TensorStats) -> str:
    """Return "min -3.1  max 712.4", or "no finite values" when there are none."""
    if stats.min is None and stats.max is None:
        return "no finite values"
    return f"min {format_number(stats.min)}  max {format_number(stats.max)}"


def disconnected_lines(disconnected: Disconnected) -> list[str]:
    """Describe the variables that got no gradient and where the path from the loss broke.

    Args:
        disconnected: Disconnected.

    Returns:
        "no gradient reaches all 12 trained variables: a, b, c, d, e and 7 more",
        then "path from the loss breaks at ArgMax" and the user's line when known.
    """
    variables = disconnected.variables
    amount = f"all {len(variables)}" if disconnected.all else str(len(variables))
    noun = "trained variable" if len(variables) == 1 else "trained variables"
    if len(variables) <= NAMES_LISTED:
        lines = [f"no gradient reaches {amount} {noun}: {listing(variables)}"]
    else:
        layers = {name.rsplit("/", 1)[0] for name in variables}
        lines = [
            f"no gradient reaches {amount} {noun} in {count(len(layers), 'layer')} "
            "(the names are in the JSON report)"
        ]
    point = disconnected.break_point
    if point is not None:
        lines.append(f"path from the loss breaks at {point.op}")
        if point.source is not None:
            lines.append(source_line(point.source))
    return lines


def not_fix_lines(not_fixes: Sequence[NotFix]) -> list[str]:
    """List the remedies that will not help: "Will not help:" then "  - remedy: why"."""
    if not not_fixes:
        return []
    return [
        NOT_FIXES_HEADING,
        *(
            line
            for item in not_fixes
            for line in (
                f"  - {item.remedy}: {first_sentence(item.why)}{untried_note(item)}",
                *([f"      {item.evidence}"] if item.evidence else []),
            )
        ),
    ]


def untried_note(item: NotFix) -> str:
    """ " (expected; not tried)" for a not-fix that is an expectation no trial bore out."""
    return " (expected; not tried)" if item.untried_expectation else ""


def first_sentence(text: str) -> str:
    """The text's first clause (the terminal keeps to one screen; the JSON report has all)."""
    ends = [i for i in (text.find(". "), text.find("; "), text.find(": ")) if i >= 0]
    return text if not ends else text[: min(ends)] + "."


def fix_heading_lines(number: int, fix: Fix) -> list[str]:
    """Head one proposed fix: "  1. title [family]" and whether a replay proved it.

    Args:
        number: int, the fix's place in the list, from 1.
        fix: Fix.

    Returns:
        The title line, then "verified: ..." or "not verified: ..." when the fix
        was replayed (or when there is evidence to show).
    """
    lines = [f"  {number}. {fix.title} [{fix.family}]"]
    verdict = {True: "verified", False: "not verified", None: "evidence"}[fix.verified]
    if fix.verified is not None or fix.evidence:
        detail = f": {fix.evidence}" if fix.evidence else ""
        lines.append(" " * CODE_INDENT + verdict + detail)
    return lines


def warning_lines(finding: Finding) -> list[str]:
    """Describe an early warning briefly: what, where, how close to the limit, and why.

    Args:
        finding: Finding, raised while the run was still finite.

    Returns:
        "  saturation at step 12, Exp in layer `attn`", then "    value 61.3 of limit
        88.72, limit expected at step 140" when known, the user's line, and the
        explanation.
    """
    parts = [finding_title(finding)]
    if finding.origin is not None:
        parts.append(op_place(finding.origin))
    lines = ["  " + ", ".join(parts)]
    closeness = [headroom_text(finding.headroom)] if finding.headroom else []
    if finding.forecast_step is not None:
        closeness.append(f"limit expected at step {finding.forecast_step}")
    if closeness:
        lines.append("    " + ", ".join(closeness))
    if finding.origin is not None and finding.origin.source is not None:
        lines.append("  " + source_line(finding.origin.source))
    lines.append("    " + finding.explanation)
    return lines


def headroom_text(headroom: Headroom) -> str:
    """Return "value 61.3 of limit 88.72"."""
    return f"value {format_number(headroom.value)} of limit {format_number(headroom.limit)}"


def render_report(
    report: Report, console: Console | None = None, problems_shown: bool = False
) -> None:
    """Print the diagnosis of a run: header, each problem in a panel, then warnings.

    Args:
        report: Report, the outcome of a watched run.
        console: rich Console to print to. Defaults to a Console on stderr, so the
            doctor's text does not mix with what the user's script prints on stdout.
        problems_shown: bool. The problems were already printed when they were
            found (`render_finding`); print only the summary. Defaults to False.

    Example:
        >>> render_report(report, Console(no_color=True))
    """
    console = console or Console(stderr=True)
    console.print(
        Text.assemble(
            ("gradient-doctor ", "bold"),
            (header_line(report), STATUS_STYLES[report.status]),
        )
    )
    if report.script_error is not None:
        console.print(Text(f"the script raised: {report.script_error}", style="red"))
    for number, finding in enumerate(report.problems, start=1):
        if problems_shown:
            console.print(Text(f"problem {number}: {finding_title(finding)} (details above)"))
        else:
            console.print(finding_panel(finding, f"problem {number}: {finding_title(finding)}"))
    if report.warnings:
        console.print(Text(WARNINGS_HEADING, style="bold yellow"))
        for finding in report.warnings:
            console.print(Group(*(styled_line(line) for line in warning_lines(finding))))


def render_finding(finding: Finding, console: Console | None = None) -> None:
    """Print one finding in a panel as soon as it is made.

    Args:
        finding: Finding.
        console: rich Console to print to. Defaults to a Console on stderr.
    """
    console = console or Console(stderr=True)
    console.print(finding_panel(finding, f"gradient-doctor: {finding_title(finding)}"))


def render_warning(finding: Finding, console: Console | None = None) -> None:
    """Print one early warning, briefly, when it is first raised.

    Args:
        finding: Finding, raised while the run was still finite.
        console: rich Console to print to. Defaults to a Console on stderr.
    """
    console = console or Console(stderr=True)
    console.print(Text("gradient-doctor warning", style="bold yellow"))
    console.print(Group(*(styled_line(line) for line in warning_lines(finding))))


def finding_panel(finding: Finding, title: str) -> Panel:
    """Draw a finding in a red panel, its fix code highlighted as Python.

    Args:
        finding: Finding.
        title: str, the panel's title (shown as plain text, never as markup).

    Returns:
        A rich Panel holding the lines of `diagnosis_lines` and the fixes.
    """
    parts: list[RenderableType] = [styled_line(line) for line in diagnosis_lines(finding)]
    if finding.fixes:
        parts.append(styled_line(FIXES_HEADING))
    for number, fix in enumerate(finding.fixes[:FIXES_WITH_CODE], start=1):
        parts += [styled_line(line) for line in fix_heading_lines(number, fix)]
        parts.append(Padding(fix_syntax(fix.code), (0, 0, 0, CODE_INDENT)))
        if fix.patch:
            parts.append(Padding(patch_text(fix), (0, 0, 0, CODE_INDENT)))
    parts += [styled_line(line) for line in more_fixes_lines(finding)]
    return Panel(
        Group(*parts), title=Text(title, style="bold red"), title_align="left", border_style="red"
    )


_DIFF_STYLES = {"header": "bold", "hunk": "magenta", "added": "green", "removed": "red"}


def patch_text(fix: Fix) -> Text:
    """The fix's patch as a coloured diff (added lines green, removed red)."""
    text = Text(overflow="fold")
    for number, line in enumerate(patch_lines(fix)):
        style = "dim" if number == 0 else _DIFF_STYLES.get(diff_line_kind(line) or "", "")
        text.append(("\n" if number else "") + line, style=style)
    return text


def fix_syntax(code: str) -> Syntax:
    """Highlight fix code as Python in the terminal's own colours (no painted background)."""
    return Syntax(
        code.strip("\n"), "python", theme="ansi_dark", background_color="default", word_wrap=True
    )


def styled_line(line: str) -> RenderableType:
    """Turn a plain line into rich Text, styled by how it begins; never parsed as markup.

    Leading spaces become padding, so a line that wraps keeps its indent.
    """
    text = line.lstrip(" ")
    style = next((style for start, style in LINE_STYLES if text.startswith(start)), "")
    return Padding(Text(text, style=style), (0, 0, 0, len(line) - len(text)), expand=False)
