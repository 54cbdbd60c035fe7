"""Rewrite the log of a softmax on the user's line into the library's log_softmax.

`torch.log(F.softmax(logits, dim=1))` is -inf wherever the softmax underflowed to 0, and
its gradient 1 / p is infinite there; `F.log_softmax(logits, dim=1)` computes the same
value as `x - logsumexp(x)`, finite everywhere, with no clamp that changes it. Every
namespace that has a softmax has a log_softmax of the same name beside it, taking the
same arguments: `F.`, `torch.`, a tensor's method (`x.softmax(dim=1)`), `tf.nn.`,
`tf.math.`, `keras.ops.`, `keras.activations.`, `scipy.special.`, `jax.nn.`; so the
rewrite renames the softmax call as the user wrote it and drops the log around it.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Sequence

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import Edit, Fix, SourceLine
from gradient_doctor.core.knowledge.source.calls import (
    assigned_name,
    find_call,
    parses,
    replace_span,
)

TITLE = "Compute log(softmax(x)) as log_softmax(x), which is exact and never -inf"
# The log ops whose input can be a softmax's output (PyTorch's log2 and log10 are "Log"
# too, but only a natural log of a softmax is a log_softmax).
OPS = frozenset({"Log"})


def log_softmax(code: str, op: str, focus: tuple[int, int] | None = None) -> Fix | None:
    """A `library_function` fix replacing `log(softmax(args))` on the line by
    `log_softmax(args)`, or None when the log's argument is not a softmax call as a whole.

    Args:
        code: str, the user's line ("" when unknown).
        op: str, the origin's op type (or, for a backward origin, its forward op's).
        focus: where on the line the log was made (`SourceLine.span`).

    Returns:
        The fix, rewriting the line, or None.
    """
    if op not in OPS or not code:
        return None
    code = code.strip()
    log = find_call(code, ("log",), focus)
    if log is None or len(log.args) != 1 or log.kwargs:
        return None
    argument = log.args[0].strip()
    softmax = find_call(argument, ("softmax",))
    if softmax is None or softmax.start != 0 or softmax.end != len(argument):
        return None
    renamed = f"{softmax.prefix}log_{argument[len(softmax.prefix) :]}"
    rewritten = replace_span(code, log.start, log.end, renamed)
    if not parses(renamed, "eval") or (parses(code) and not parses(rewritten)):
        return None
    return Fix("library_function", TITLE, rewritten, rewrite=(rewritten,))


MOVED_TITLE = (
    "Compute the log-probabilities with log_softmax where the softmax is, and take no log "
    "of the ones picked from them: the same values, exact and never -inf"
)


def log_softmax_moved(softmax: OpCall | None, log_at: SourceLine | None) -> Fix | None:
    """A `library_function` fix for a log of values picked from a softmax on another line
    (`probs = F.softmax(z, 1)`, then `p = probs.gather(1, y)`, then `torch.log(p)`): the
    softmax renamed log_softmax on its line (the variable then holds log-probabilities),
    the log around the picked values dropped on the log's line. None when there is no
    such softmax, it is on the log's own line (`log_softmax`'s rewrite), either call is
    not found whole, or a line would not parse.

    Args:
        softmax: the softmax the log's input was picked from, read by nothing else on
            the way (`Evidence.picked_softmax`): what else read it would read logs now.
        log_at: the log's line.
    """
    found = _two_lines(softmax, log_at)
    if found is None:
        return None
    softmax_at, softmax_code, log_code, call, log = found
    renamed = f"{call.prefix}log_{call.text[len(call.prefix) :]}"
    new_softmax = replace_span(softmax_code, call.start, call.end, renamed)
    argument = log.args[0].strip()
    bare = argument if argument.replace(".", "").replace("_", "a").isalnum() else f"({argument})"
    new_log = replace_span(log_code, log.start, log.end, bare)
    if not (parses(new_softmax) and parses(new_log)):
        return None
    edit = Edit(softmax_at.file, softmax_at.line, softmax_at.line, (new_softmax,), (softmax_code,))
    return Fix(
        "library_function",
        MOVED_TITLE,
        "\n".join([f"{new_softmax}  # log-probabilities now", new_log]),
        rewrite=(new_log,),
        edits=(edit,),
    )


IN_PLACE_TITLE = (
    "Take the log of the softmax as log_softmax of its input where the log is: the same "
    "values, exact and never -inf (the probabilities stay for what else reads them)"
)
# The targets of an assignment on a line: what stands before its `=` (or `+=`, ...),
# not a comparison's `==`, `<=`, `>=`, `!=`, nor a keyword argument's `=` inside a call.
_ASSIGNMENT = re.compile(r"^\s*([^=()]*?)\s*(\*\*|//|>>|<<|[-+*/@%&|^])?=(?!=)")


def log_of_softmax(
    softmax: OpCall | None, log_at: SourceLine | None, between: Sequence[str] = ()
) -> Fix | None:
    """A `library_function` fix for a log of a softmax's output held in a name, which
    other ops read too (`probs = F.softmax(z, -1)`, then `-(probs * torch.log(probs))`):
    the log's call, on the log's line, becomes the softmax's call renamed log_softmax
    (`torch.log_softmax(z, -1)`), the probabilities left for their other readers. None
    unless the log's one argument is the name the softmax's line assigned, on a later
    line of the same file, and neither it nor any name the softmax's call reads is
    assigned on the lines `between` them (then the renamed call computes the same
    values where the log is).

    Args:
        softmax: the softmax whose output the log reads (`Evidence.logged_softmax`).
        log_at: the log's line.
        between: the file's lines after the softmax's line and before the log's.
    """
    found = _two_lines(softmax, log_at)
    if found is None or not found[0].line < log_at.line:
        return None
    _, softmax_code, log_code, call, log = found
    held = assigned_name(softmax_code)
    if held is None or log.args[0].strip() != held:
        return None
    read = {held, *re.findall(r"[A-Za-z_]\w*", call.text[len(call.prefix) :])}
    for line in between:
        assigned = _ASSIGNMENT.match(line)
        if assigned and read & set(re.findall(r"[A-Za-z_]\w*", assigned.group(1))):
            return None
    renamed = f"{call.prefix}log_{call.text[len(call.prefix) :]}"
    rewritten = replace_span(log_code, log.start, log.end, renamed)
    if not parses(renamed, "eval") or (parses(log_code) and not parses(rewritten)):
        return None
    return Fix("library_function", IN_PLACE_TITLE, rewritten, rewrite=(rewritten,))


def _two_lines(softmax: OpCall | None, log_at: SourceLine | None):
    """(the softmax's line, its code, the log's code, the softmax call, the log call) for
    a softmax and a log of one argument on two lines of one file; else None."""
    if softmax is None or log_at is None or softmax.source is None:
        return None
    softmax_at = softmax.source
    if softmax_at.file != log_at.file or softmax_at.line == log_at.line:
        return None
    softmax_code, log_code = (softmax_at.code or "").strip(), (log_at.code or "").strip()
    call = find_call(softmax_code, ("softmax",), softmax_at.span)
    log = find_call(log_code, ("log",), log_at.span)
    if call is None or log is None or len(log.args) != 1 or log.kwargs:
        return None
    return softmax_at, softmax_code, log_code, call, log


def logged_softmax_fix(softmax: OpCall | None, log_at: SourceLine | None) -> Fix | None:
    """`log_of_softmax` with the lines between the softmax's line and the log's read from
    the user's file (none read when either line is unknown)."""
    if softmax is None or log_at is None or softmax.source is None:
        return None
    lines = linecache.getlines(log_at.file)
    between = lines[softmax.source.line : log_at.line - 1]
    return log_of_softmax(softmax, log_at, between)
