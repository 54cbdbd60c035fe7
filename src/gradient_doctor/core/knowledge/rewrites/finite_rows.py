"""Rewrite the user's `fit(...)` call so that it trains only on the rows of its data that
are finite.

`model.fit(x, y, sample_weight=w, ...)` gets one line before it,
`finite_rows = np.isfinite(x).reshape(len(x), -1).all(axis=1) & ...` over every NumPy
array `fit` was given, and each of those arrays indexed by it (`x[finite_rows]`): an
example whose features, target or weight hold NaN or Inf (a missing value read as NaN) is
left out, the others keep their order. The mask is a new name, so no name of the user's
is reassigned; the trial drops the same rows (`FitCall.finite_batches`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from gradient_doctor.core.findings import Edit, SourceLine
from gradient_doctor.core.knowledge.rewrites.data import PARTS as DATA_PARTS
from gradient_doctor.core.knowledge.source.syntax_edit import (
    argument,
    combined,
    fit_call,
    module_alias,
    parse,
    segment,
)

# Each part of `fit`'s data: its position in the call (sample weights by keyword only).
PARTS = {**DATA_PARTS, "sample_weight": None}
# The name the patch gives the mask of the rows it keeps.
MASK_NAME = "finite_rows"
# Past this length, the mask's terms go on lines of their own.
_LINE_LENGTH = 88


@dataclass(frozen=True)
class FitRows:
    """A `fit` call given NumPy arrays, some of whose rows hold NaN or Inf.

    Attributes:
        source: the user's `fit(...)` line.
        parts: the parts of `fit`'s data given as NumPy arrays, in `PARTS` order.
        ranks: each part's number of dimensions.
        holding: the parts whose rows hold NaN or Inf.
        dropped: how many rows hold a non-finite value in one of them.
        total: how many rows they have.
    """

    source: SourceLine
    parts: tuple[str, ...]
    ranks: tuple[int, ...]
    holding: tuple[str, ...]
    dropped: int
    total: int


def drop_nonfinite_rows(site: FitRows, lines: Sequence[str]) -> Edit | None:
    """An edit of the statement holding `site`'s `fit` call: the mask's line before it,
    each of `site.parts` indexed by the mask.

    Returns None when the line has no `fit` call, a part is not written as a name, an
    attribute or a subscript (an expression that may compute anew each time it runs),
    the file does not import NumPy, the mask's name is taken, or the statement does not
    begin its line (a one-line `if` or `with` body).
    """
    tree, text = parse(lines)
    if tree is None or MASK_NAME in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}:
        return None
    numpy = module_alias(tree, "numpy")
    fit = fit_call(tree, site.source)
    if numpy is None or fit is None:
        return None
    values = [argument(fit, PARTS[part], part) for part in site.parts]
    if not values or not all(
        isinstance(v, ast.Name | ast.Attribute | ast.Subscript) for v in values
    ):
        return None
    statement = _statement_holding(tree, fit)
    line = text[statement.lineno - 1] if statement is not None else ""
    indent = line[: len(line) - len(line.lstrip())]
    if statement is None or len(indent.encode("utf-8")) != statement.col_offset:
        return None
    names = [segment(text, value) for value in values]
    terms = [
        f"{numpy}.isfinite({name})"
        + ("" if rank == 1 else f".reshape(len({name}), -1).all(axis=1)")
        for name, rank in zip(names, site.ranks)
    ]
    mask = [f"{indent}{MASK_NAME} = {' & '.join(terms)}"]
    if len(mask[0]) > _LINE_LENGTH:
        inner = indent + "    "
        mask = [f"{indent}{MASK_NAME} = (", f"{inner}{terms[0]}"]
        mask += [f"{inner}& {term}" for term in terms[1:]] + [f"{indent})"]
    changes = [(value, f"{name}[{MASK_NAME}]") for value, name in zip(values, names)]
    call = combined(text, fit, changes, site.source.file)
    first = statement.lineno
    return Edit(
        site.source.file,
        first,
        call.end_line,
        # the mask, then the statement's lines before the call's, then the call's
        (*mask, *text[first - 1 : call.line - 1], *call.new_lines),
        tuple(text[first - 1 : call.end_line]),
    )


def _statement_holding(tree: ast.Module, call: ast.Call) -> ast.stmt | None:
    """The innermost statement whose span holds `call` (of two starting on one line, the
    deeper: `ast.walk` visits it later)."""
    found = None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.stmt)
            and node.lineno <= call.lineno
            and node.end_lineno >= call.end_lineno
            and (found is None or node.lineno >= found.lineno)
        ):
            found = node
    return found
