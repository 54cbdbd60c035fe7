"""Lines written like another but for their names: `b = b / b.norm(dim=-1)` beside
`a = a / a.norm(dim=-1)`.

A rewrite that guards an op on the user's line must guard its twins too: the pair of
embeddings a cosine similarity normalises, an anchor's and a positive's distance, the
queries and keys of one attention. The replay names the one that failed at this step;
the next step's batch makes the other fail the same way (a zero vector on either side),
and a patch of the first alone moves the failure one line down.
"""

from __future__ import annotations

import io
import keyword
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import replace

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import Edit, Fix, SourceLine


def twin_calls(origin: SourceLine | None, calls: Sequence[OpCall]) -> tuple[OpCall, ...]:
    """Of `calls` (the step's other calls of the origin's op), those on a line written as
    `origin`'s is but for its variables' names, renamed one for one; each line once."""
    if origin is None or not origin.code or origin.end_line is not None:
        return ()
    found: dict[tuple[str, int], OpCall] = {}
    for call in calls:
        source = call.source
        place = (source.file, source.line)
        if place == (origin.file, origin.line) or place in found or source.end_line is not None:
            continue
        if call.source_kind == "op" and source.code and are_twins(origin.code, source.code):
            found[place] = call
    return tuple(found.values())


def with_twins(
    fix: Fix | None,
    twins: Sequence[OpCall],
    rewrite: Callable[[str, tuple[int, int] | None], Fix | None],
) -> Fix | None:
    """`fix`, a rewrite of the origin's line, with the same rewrite of each twin line
    (`twin_calls`) as an edit of its own: `rewrite(code, focus)` makes a twin's fix,
    whose line is taken when it rewrote it. A twin it cannot rewrite is left as it is."""
    if fix is None or not fix.rewrite or not twins:
        return fix
    edits = list(fix.edits)
    for twin in twins:
        source = twin.source
        code = source.code.strip()
        made = rewrite(code, source.span)
        if made is not None and made.rewrite and made.rewrite[0] != code:
            edits.append(Edit(source.file, source.line, source.line, made.rewrite, (code,)))
    return replace(fix, edits=tuple(edits))


def are_twins(first: str, second: str) -> bool:
    """Whether two lines differ only in their variables' names, one for one (`a` for `b`
    everywhere; an attribute or a keyword argument's name must be the same), and differ."""
    ours, theirs = _tokens(first), _tokens(second)
    if ours is None or theirs is None or len(ours) != len(theirs) or ours == theirs:
        return False
    forward: dict[str, str] = {}
    backward: dict[str, str] = {}
    for index, ((kind, text), (other_kind, other_text)) in enumerate(zip(ours, theirs)):
        if kind != other_kind:
            return False
        variable = kind == tokenize.NAME and not keyword.iskeyword(text)
        variable = variable and _is_variable(ours, index)
        if text == other_text and not variable:
            continue
        if not variable:
            return False
        if forward.setdefault(text, other_text) != other_text:
            return False
        if backward.setdefault(other_text, text) != text:
            return False
    return True


def _tokens(code: str) -> list[tuple[int, str]] | None:
    """The line's tokens as (type, text), without layout; None when it does not tokenise."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(code.strip()).readline)
        return [
            (token.type, token.string)
            for token in tokens
            if token.type
            not in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.COMMENT)
        ]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def _is_variable(tokens: list[tuple[int, str]], index: int) -> bool:
    """Whether the name at `index` is a variable: not an attribute (after a dot) nor a
    keyword argument's name (before a single `=` inside a call)."""
    before = tokens[index - 1][1] if index > 0 else ""
    after = tokens[index + 1][1] if index + 1 < len(tokens) else ""
    if before == ".":
        return False
    return not (after == "=" and before in ("(", ","))
