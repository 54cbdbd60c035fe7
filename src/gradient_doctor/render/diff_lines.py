"""Classify the lines of a unified diff, so every renderer colours a fix's patch alike."""

from __future__ import annotations


def diff_line_kind(line: str) -> str | None:
    """ "header", "hunk", "added" or "removed" for a line of a unified diff, else None."""
    if line.startswith(("--- ", "+++ ")):
        return "header"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "added"
    if line.startswith("-"):
        return "removed"
    return None
