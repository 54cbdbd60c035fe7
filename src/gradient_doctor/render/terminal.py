"""The report on the terminal: the plain text lines of `render.text`, styled with rich."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.report import Report
from gradient_doctor.render.diff_lines import diff_line_kind
from gradient_doctor.render.text import (
    CODE_INDENT,
    FIXES_HEADING,
    FIXES_WITH_CODE,
    NOT_FIXES_HEADING,
    WARNINGS_HEADING,
    diagnosis_lines,
    error_headline,
    finding_title,
    fix_heading_lines,
    header_line,
    more_fixes_lines,
    patch_lines,
    said_once,
    verdicts_line,
    warning_lines,
)

STATUS_STYLES = {"healthy": "bold green", "interrupted": "bold yellow", "problem": "bold red"}

# Styles keyed by how a line's text begins (after its indent), so the plain text
# stays the one source of truth.
LINE_STYLES = (
    ("-> ", "bold yellow"),
    ("op: ", "bold"),
    (NOT_FIXES_HEADING, "bold"),
    (FIXES_HEADING, "bold"),
)


def render_report(
    report: Report,
    console: Console | None = None,
    problems_shown: bool = False,
    shown: Sequence[Finding] = (),
) -> None:
    """Print the diagnosis of a run: header, each problem in a panel, then warnings.

    Args:
        report: Report, the outcome of a watched run.
        console: rich Console to print to. Defaults to a Console on stderr, so the
            doctor's text does not mix with what the user's script prints on stdout.
        problems_shown: bool. The problems were already printed when they were
            found (`render_finding`); print only the summary. Defaults to False.
        shown: the problems as they were printed then, when reruns judged their
            fixes since: a problem whose verdicts changed (a fix verified or refuted,
            a "will not help" promoted) is printed again in full, so that no panel on
            the screen says a fix will not help that the reruns verified.

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
        # Its traceback is printed above in full; the JSON report keeps the whole message.
        headline = error_headline(report.script_error)
        if headline.startswith("SystemExit"):  # sys.exit(N): an exit, with no traceback
            said = f"the script exited ({headline})"
        else:
            said = f"the script raised {headline} (traceback above)"
        console.print(Text(said, style="red"))
    for number, finding in enumerate(report.problems, start=1):
        changed = number <= len(shown) and _verdicts(shown[number - 1]) != _verdicts(finding)
        if changed:
            title = f"problem {number}: {finding_title(finding)}, as the reruns left it"
            console.print(finding_panel(finding, title))
        elif problems_shown:
            console.print(Text(f"problem {number}: {finding_title(finding)} (details above)"))
            if finding.fixes:
                console.print(Text(f"  {verdicts_line(finding)}"))
        else:
            console.print(finding_panel(finding, f"problem {number}: {finding_title(finding)}"))
    if report.warnings:
        console.print(Text(WARNINGS_HEADING, style="bold yellow"))
        for finding in report.warnings:
            console.print(Group(*(styled_line(line) for line in warning_lines(finding))))


def _verdicts(finding: Finding) -> tuple:
    """What a panel says of each remedy: the fixes with their verdicts and whether they
    were tried, the not-fixes and whether their expectation was (a panel that says "not
    tried" of a remedy a rerun tried since is printed again)."""
    return (
        tuple((fix.family, fix.verified, _untried(fix.evidence)) for fix in finding.fixes),
        tuple((item.remedy, item.untried_expectation) for item in finding.not_fixes),
    )


def _untried(evidence: str | None) -> bool:
    return evidence is None or evidence.startswith("not tried")


def render_finding(
    finding: Finding, console: Console | None = None, pending: str | None = None
) -> None:
    """Print one finding in a panel as soon as it is made.

    Args:
        finding: Finding.
        console: rich Console to print to. Defaults to a Console on stderr.
        pending: what is still to judge the fixes after the run (the reruns that
            confirm them), said under their heading; None says nothing.
    """
    console = console or Console(stderr=True)
    panel = finding_panel(finding, f"gradient-doctor: {finding_title(finding)}", pending)
    console.print(panel)


def render_warning(finding: Finding, console: Console | None = None) -> None:
    """Print one early warning, briefly, when it is first raised.

    Args:
        finding: Finding, raised while the run was still finite.
        console: rich Console to print to. Defaults to a Console on stderr.
    """
    console = console or Console(stderr=True)
    console.print(Text("gradient-doctor warning", style="bold yellow"))
    console.print(Group(*(styled_line(line) for line in warning_lines(finding))))


def finding_panel(finding: Finding, title: str, pending: str | None = None) -> Panel:
    """Draw a finding in a red panel, its fix code highlighted as Python.

    Args:
        finding: Finding.
        title: str, the panel's title (shown as plain text, never as markup).
        pending: see `render_finding`.

    Returns:
        A rich Panel holding the lines of `diagnosis_lines` and the fixes.
    """
    finding, untried = said_once(finding)
    parts: list[RenderableType] = [styled_line(line) for line in diagnosis_lines(finding, untried)]
    if finding.fixes:
        parts.append(styled_line(FIXES_HEADING))
        if pending:
            parts.append(styled_line(f"  ({pending})"))
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
