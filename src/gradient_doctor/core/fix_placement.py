"""Give each fix of a finding its patch: the rule's rewrite placed on the user's line.

Runs after the diagnosis and before the trials, so that what is tried is the patch
the user will read: a fix whose rewrite cannot be placed (the file changed, the
line is not the user's, the patched file would not parse) keeps its code to read
but gets no patch, and so can never be marked verified.
"""

from __future__ import annotations

import dataclasses
import os

from gradient_doctor.core.findings import Edit, Finding, Fix
from gradient_doctor.core.patches import (
    PatchError,
    patched_text,
    read_lines,
    replace_line,
    unified_diff,
)


def place_fixes(finding: Finding, root: str = ".") -> Finding:
    """The finding with `edits` and `patch` set on each fix that rewrites the origin line.

    Args:
        finding: a diagnosed finding; fixes with a `rewrite` are placed on
            `finding.origin.source`.
        root: the directory the script was run from (paths are relative to it).
    """
    source = finding.origin.source if finding.origin is not None else None
    if source is None:
        return finding
    lines = read_lines(os.path.join(root, source.file))
    if lines is None:
        return finding
    fixes = []
    for fix in finding.fixes:
        edit = replace_line(source, fix.rewrite, lines) if fix.rewrite else None
        fixes.append(with_edits(fix, (edit,), root) if edit is not None else fix)
    return dataclasses.replace(finding, fixes=tuple(fixes))


def with_edits(fix: Fix, edits: tuple[Edit, ...], root: str = ".") -> Fix:
    """`fix` with `edits` and their diff, or `fix` unchanged when the patched files do not
    parse as Python or the edits do not fit them."""
    try:
        for file in {edit.file for edit in edits}:
            path = os.path.join(root, file)
            text = patched_text(path, [e for e in edits if e.file == file])
            if file.endswith(".py"):
                compile(text, path, "exec", dont_inherit=True)
        patch = unified_diff(edits, root)
    except (PatchError, SyntaxError, ValueError):
        return fix
    if patch is None:
        return fix
    return dataclasses.replace(fix, edits=edits, patch=patch)
