"""The report as plain text lines: the one wording every renderer uses.

The terminal styles these lines (rich), the HTML report escapes them into its page,
and the TensorBoard export writes them as text summaries; none of them words a
finding its own way.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

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
from gradient_doctor.core.knowledge.layer_groups import group_by_layer
from gradient_doctor.core.knowledge.wording import at_step, count, format_number, listing, op_place
from gradient_doctor.core.report import Report

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


def header_line(report: Report) -> str:
    """Summarise a report in one line: its status, script and steps watched.

    Args:
        report: Report, the outcome of a watched run.

    Returns:
        "healthy: 1234 steps watched, no non-finite values" for a healthy run (one that
        watched no step says nothing was checked; the updates a loss scaler skipped
        itself are counted after it),
        "interrupted by SIGTERM: train.py, 37 steps watched, nothing found before the
        signal" for a run a signal stopped, else e.g. "problem: train.py, 1831 steps
        watched, 1 problem, 2 warnings" (", interrupted by SIGTERM" when it was; "the
        script raised an error, no numerical problem found before it" for a crash with no
        problem).
    """
    watched = f"{count(report.steps_watched, 'step')} watched"
    if report.status == "healthy" and report.steps_watched == 0:
        steps = (
            "a torch.optim step, or a backward() of a script that updates its tensors itself"
            if report.framework == "torch"
            else "a Keras fit, or a GradientTape's update; a script that imports TensorFlow "
            "and trains with PyTorch is watched as PyTorch only when it makes none of "
            "TensorFlow's training calls"
        )
        return (
            "healthy: 0 steps watched: no training step the doctor watches ran "
            f"({steps}), so nothing was checked"
        )
    if report.status == "healthy":
        return f"healthy: {watched}, no non-finite values{_scaler_note(report)}"
    interrupted = report.status == "interrupted"
    if interrupted:
        found = "nothing found before the signal"
    elif report.script_error is not None and not report.problems:
        found = "the script raised an error, no numerical problem found before it"
    else:
        found = count(len(report.problems), "problem")
    if report.failures_counted:
        found += (
            f" (and {count(report.failures_counted, 'more failing step')} counted, not "
            "diagnosed, under --keep-going: each one's update skipped too)"
        )
    parts = [report.script, watched, found]
    if report.warnings:
        parts.append(count(len(report.warnings), "warning"))
    if report.interrupted and not interrupted:
        parts.append(f"interrupted by {report.interrupted}")
    label = f"interrupted by {report.interrupted}" if interrupted else "problem"
    return f"{label}: " + ", ".join(part for part in parts if part)


def _scaler_note(report: Report) -> str:
    """What a loss scaler skipped itself, after a healthy run's line: "; GradScaler
    skipped 7 more updates itself, their scaled gradients past float16 (its back-off)"."""
    if not report.scaler_skipped:
        return ""
    more = count(report.scaler_skipped, "more update")
    return (
        f" reached an update; GradScaler skipped {more} itself, their scaled gradients "
        "past float16 (its usual back-off: it lowered its scale)"
    )


def finding_title(finding: Finding) -> str:
    """Name a finding by its category and step: "forward_overflow at step 1830"."""
    return f"{finding.category}{at_step(finding.step)}"


def verdicts_line(finding: Finding) -> str:
    """The fixes' verdicts in one line, as they stand at the end of the run (the reruns
    that confirm a fix come after its finding was printed): "verified: safe_log [patch],
    not verified: clip_input_domain", or "no fix verified"."""
    verified = [
        f"{fix.family}{' [patch]' if fix.patch else ''}" for fix in finding.fixes if fix.verified
    ]
    failed = [fix.family for fix in finding.fixes if fix.verified is False]
    parts = [f"verified: {', '.join(verified)}"] if verified else ["no fix verified"]
    if failed:
        parts.append(f"not verified: {', '.join(failed)}")
    return "; ".join(parts)


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
    finding, untried = said_once(finding)
    lines = [finding_title(finding), *diagnosis_lines(finding, untried)]
    if finding.fixes:
        lines.append(FIXES_HEADING)
    for number, fix in enumerate(finding.fixes[:FIXES_WITH_CODE], start=1):
        lines += fix_heading_lines(number, fix)
        lines += [" " * CODE_INDENT + line for line in fix.code.strip("\n").splitlines()]
        lines += [" " * CODE_INDENT + line for line in patch_lines(fix)]
    lines += more_fixes_lines(finding)
    return lines


def said_once(finding: Finding) -> tuple[Finding, str | None]:
    """The finding with a reason no trial ran, shared by several of its remedies (an
    unchanged PyTorch script's: no step function to call again), cut from each one's
    evidence, and that reason, to say once; (finding, None) when none is shared."""
    reasons = [
        reason
        for item in (*finding.fixes, *finding.not_fixes)
        if (reason := _untried_reason(item.evidence)) is not None
    ]
    shared = next((r for r in reasons if reasons.count(r) > 1 and len(r) > 40), None)
    if shared is None:
        return finding, None

    def cut(item):
        if not item.evidence:
            return item
        return dataclasses.replace(item, evidence=item.evidence.replace(f": {shared}", ""))

    fixes = tuple(cut(fix) for fix in finding.fixes)
    not_fixes = tuple(cut(item) for item in finding.not_fixes)
    return dataclasses.replace(finding, fixes=fixes, not_fixes=not_fixes), shared


def _untried_reason(evidence: str | None) -> str | None:
    """Why no trial ran, as the evidence gives it last: "not tried: <why>", or
    "... (not tried inside the run: <why>)"; None when it gives none."""
    for marker, closing in (("(not tried inside the run: ", ")"), ("not tried: ", "")):
        if evidence and marker in evidence:
            reason = evidence.rsplit(marker, 1)[1]
            return reason.removesuffix(closing) if closing else reason
    return None


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


def diagnosis_lines(finding: Finding, untried: str | None = None) -> list[str]:
    """Write everything about a finding that comes before its fixes.

    Args:
        finding: Finding.
        untried: why no trial inside the run tried its remedies, said once before
            them (`said_once`), or None.

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
    if untried is not None:
        lines.append(f"Not tried inside the run: {untried}.")
    lines += not_fix_lines(finding.not_fixes)
    return lines


def skipped_lines(finding: Finding) -> list[str]:
    """Say that the doctor skipped the update(s), so the weights are those before them."""
    if finding.skipped_updates <= 0:
        return []
    if finding.own_update:
        return [
            "The doctor stopped this step before it reached the weights: you update them "
            "yourself, so it set the step's gradients to zero before your update read them "
            "(it moved nothing)."
        ]
    what = (
        "its update was skipped"
        if finding.skipped_updates == 1
        else f"{finding.skipped_updates} updates were skipped"
    )
    if finding.broken_before:
        return [
            f"The doctor stopped the failing step ({what}), but the weights were already "
            "NaN or Inf when it began: the last good weights are not kept."
        ]
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
        origin.reported_op
        if origin.gradient_of is None
        else f"{origin.reported_op} (gradient of {origin.reported_gradient_of})"
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
        the step)"; for an op of an optimizer's update: "     (built the optimizer whose
        update of `dense/kernel` overflowed)"; for an op of the input pipeline: "     (in
        your input pipeline, which made the batch)"; else nothing.
    """
    if origin.source_kind == "layer_creation":
        layer = f"layer `{origin.layer}`" if origin.layer else "the layer"
        if origin.variable:
            return [f"     (created {layer}, which holds `{origin.variable}`)"]
        return [f"     (created {layer}, where Keras ran {origin.op})"]
    if origin.source_kind == "state_write":
        written = f"`{origin.variable}`" if origin.variable else "the variable"
        return [f"     (wrote {written} before the step)"]
    if origin.source_kind == "optimizer_creation":
        written = f"`{origin.variable}`" if origin.variable else "the weights"
        return [f"     (built the optimizer whose update of {written} overflowed)"]
    if origin.source_kind == "input_pipeline":
        return ["     (in your input pipeline, which made the batch)"]
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
        parts.append(min_max(stats))
    parts += [f"nan {stats.nan}", f"inf {stats.inf}"]
    if with_range:
        parts.append(f"zeros {stats.zeros}")
    return "  ".join(parts)


def min_max(stats: TensorStats) -> str:
    """Return "min -3.1  max 712.4", or "no finite values" when there are none. A bound
    that rounds to a whole number it is not (a cosine of 1.00000024, past acos's
    domain) is written with the digits that show it is not."""
    if stats.min is None and stats.max is None:
        return "no finite values"
    return f"min {_exact_enough(stats.min)}  max {_exact_enough(stats.max)}"


def _exact_enough(value: float | None) -> str:
    """`format_number(value)`, with up to 9 significant digits when 4 would write a
    whole number that `value` is not."""
    shown = format_number(value)
    if value is None or not math.isfinite(value) or value == int(value):
        return shown
    return format_number(value, 9) if shown.lstrip("-").isdigit() else shown


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
        # Keras names a variable `layer/kernel`, PyTorch `layer.weight`.
        separator = "/" if any("/" in name for name in variables) else "."
        layers = group_by_layer(variables, separator)
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
    """ " (expected; not tried)" for a not-fix that is an expectation no trial bore out
    (" (expected; its trial could not tell)" when one ran)."""
    if not item.untried_expectation:
        return ""
    return " (expected; its trial could not tell)" if item.evidence else " (expected; not tried)"


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


# Lines of a framework's error message that say where, not what (TensorFlow's graph
# errors list the op's stack and node after a first line that says only "Graph
# execution error:").
_WHERE_LINES = ("File ", "[[", "Detected at node")
_HEADLINE_CHARACTERS = 300
# A line ending in ":" this short only announces what follows ("Graph execution error:");
# a longer one says what went wrong before listing the values ("Expected parameter scale
# ... to satisfy the constraint GreaterThan(lower_bound=0.0), but found invalid values:").
_ANNOUNCING_CHARACTERS = 40


def error_headline(error: str) -> str:
    """The line of a script's error that says what went wrong, for a summary printed
    under its full traceback: "InvalidArgumentError: Received a label value of 10 which is
    outside the valid range of [0, 10)...", not TensorFlow's stack of the failing node.
    The exception's type (the text before the first ": ") is kept in front."""
    kind, _, message = error.partition(": ")
    if not message:
        kind, message = "", error
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    telling = [line for line in lines if not line.startswith(_WHERE_LINES)]
    said = [line for line in telling if not _announces(line)] or telling or [error.strip()]
    headline = said[0]
    if len(headline) > _HEADLINE_CHARACTERS:
        headline = headline[: _HEADLINE_CHARACTERS - 3].rstrip() + "..."
    return f"{kind}: {headline}" if kind else headline


def _announces(line: str) -> bool:
    """A line that only announces what follows it (`_ANNOUNCING_CHARACTERS`)."""
    return line.endswith(":") and len(line) <= _ANNOUNCING_CHARACTERS
