"""Place a fix's rewrite in the user's file as an `Edit`, and write edits as a unified diff.

A fix is proved on its patch, so the patch is built once, here, from the lines the
rule rewrote and the file as it is on disk; the fix trial applies the same edits and
`gradient-doctor fix` applies the same diff. Paths are relative to the directory the
script was run from, with `a/` and `b/` prefixes, so `patch -p1` and `git apply` take
the diff as it is.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Sequence

from gradient_doctor.core.findings import Edit, SourceLine

_NO_NEWLINE = "\\ No newline at end of file\n"


class PatchError(ValueError):
    """An edit that does not fit the file as it is (it changed, or the line is gone)."""


def read_lines(path: str) -> list[str] | None:
    """The lines of `path`, each with its line ending, or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read().splitlines(keepends=True)
    except (OSError, UnicodeDecodeError):
        return None


def indentation(line: str) -> str:
    """The leading whitespace of `line`."""
    return line[: len(line) - len(line.lstrip())]


def line_ending(line: str) -> str:
    """The line ending `line` uses ("\\n" when it has none: the file's last line)."""
    for ending in ("\r\n", "\n", "\r"):
        if line.endswith(ending):
            return ending
    return "\n"


def replace_line(source: SourceLine, new_code: Sequence[str], lines: list[str]) -> Edit | None:
    """An edit replacing the user's line `source` by `new_code`, indented as the line was.

    Args:
        source: the line to replace; its `code` is the line's text, stripped.
        new_code: the replacement lines without indentation (a rule's `rewrite`).
        lines: the file's lines, with line endings.

    Returns:
        The `Edit` (deleting the line when `new_code` is empty), or None when the file's
        line no longer holds `source.code` (the file changed since the run read it) or
        nothing would change.
    """
    if not 1 <= source.line <= len(lines):
        return None
    old = lines[source.line - 1]
    if old.strip() != source.code.strip():
        return None
    if not new_code:
        return Edit(source.file, source.line, source.line, (), (old.rstrip("\r\n"),))
    indent = indentation(old)
    new = tuple(f"{indent}{text.strip()}" if text.strip() else "" for text in new_code)
    if new == (old.rstrip("\r\n"),):
        return None
    return Edit(source.file, source.line, source.line, new, (old.rstrip("\r\n"),))


def apply_edits(lines: list[str], edits: Iterable[Edit]) -> list[str]:
    """The file's lines with `edits` applied (line numbers are the original file's).

    Raises:
        PatchError: when an edit's old lines are not where it says, or edits overlap.
    """
    result = list(lines)
    placed: list[tuple[int, int]] = []
    for edit in sorted(edits, key=lambda e: e.line, reverse=True):
        first, last = edit.line - 1, edit.end_line  # result[first:last] is replaced
        if any(first < end and start < last for start, end in placed):
            raise PatchError(f"edits overlap at line {edit.line} of {edit.file}")
        current = tuple(line.rstrip("\r\n") for line in result[first:last])
        if edit.old_lines and current != edit.old_lines:
            raise PatchError(
                f"line {edit.line} of {edit.file} is no longer what the run read "
                f"(expected {edit.old_lines[0]!r}, found {current[0] if current else ''!r})"
            )
        ending = line_ending(result[first] if first < len(result) else "\n")
        tail = result[last - 1] if last - 1 < len(result) and last > first else "\n"
        new = [text + ending for text in edit.new_lines]
        if new and not tail.endswith(("\n", "\r")):  # the file's last line had no newline
            new[-1] = new[-1].rstrip("\r\n")
        result[first:last] = new
        placed.append((first, last))
    return result


def unified_diff(edits: Sequence[Edit], root: str = ".") -> str | None:
    """`edits` as one unified diff of the files they change, paths relative to `root`.

    Returns:
        The diff (`--- a/PATH`, `+++ b/PATH`, hunks), or None when there is nothing
        to change or a file cannot be read.

    Raises:
        PatchError: when an edit does not fit its file.
    """
    by_file: dict[str, list[Edit]] = {}
    for edit in edits:
        by_file.setdefault(edit.file, []).append(edit)
    parts = []
    for file, file_edits in by_file.items():
        lines = read_lines(os.path.join(root, file))
        if lines is None:
            return None
        patched = apply_edits(lines, file_edits)
        path = file.replace(os.sep, "/")
        diff = difflib.unified_diff(lines, patched, f"a/{path}", f"b/{path}", n=3)
        parts.extend(_with_newline_markers(diff))
    return "".join(parts) or None


def _with_newline_markers(diff: Iterable[str]) -> Iterable[str]:
    """Diff lines with git's marker after a last line that has no newline."""
    for line in diff:
        if line.endswith(("\n", "\r")):
            yield line
        else:
            yield line + "\n"
            yield _NO_NEWLINE


def patched_text(path: str, edits: Sequence[Edit]) -> str:
    """The text of `path` with `edits` applied (the file on disk is not touched).

    Raises:
        PatchError: when the file cannot be read or an edit does not fit it.
    """
    lines = read_lines(path)
    if lines is None:
        raise PatchError(f"cannot read {path!r}")
    return "".join(apply_edits(lines, edits))


def apply_unified_diff(diff: str, root: str) -> dict[str, str]:
    """The new text of each file a unified diff changes, read from under `root`.

    Applies what `unified_diff` writes (and `patch -p1` takes): `--- a/PATH` and
    `+++ b/PATH` headers, then hunks whose context must match the file exactly (at
    the line the hunk names, or nearby when lines above moved).

    Raises:
        PatchError: when a file cannot be read or a hunk does not match it.
    """
    results: dict[str, str] = {}
    for path, hunks in _parse_diff(diff):
        lines = read_lines(os.path.join(root, path))
        if lines is None:
            raise PatchError(f"cannot read {path!r} under {root!r}")
        results[path] = "".join(_apply_hunks(lines, hunks, path))
    return results


def _parse_diff(diff: str) -> list[tuple[str, list[tuple[int, list[str]]]]]:
    """[(path, [(old start line, hunk body lines)])] of a unified diff, `b/` dropped."""
    files: list[tuple[str, list[tuple[int, list[str]]]]] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("+++ "):
            path = line[4:].strip().split("\t")[0]
            files.append((path[2:] if path.startswith("b/") else path, []))
        elif line.startswith("--- "):
            continue
        elif line.startswith("@@") and files:
            old = line.split()[1]  # "-42,7"
            files[-1][1].append((int(old[1:].split(",")[0]), []))
        elif files and files[-1][1] and line[:1] in (" ", "+", "-", "\\"):
            files[-1][1][-1][1].append(line)
    return files


def _apply_hunks(lines: list[str], hunks: list[tuple[int, list[str]]], path: str) -> list[str]:
    result = list(lines)
    shift = 0
    for start, body in hunks:
        old = [line[1:] for line in body if line[:1] in (" ", "-")]
        new = [line[1:] for line in body if line[:1] in (" ", "+")]
        old, new = _no_newline_markers(body, old, new)
        at = _find(result, old, max(start - 1 + shift, 0))
        if at is None:
            raise PatchError(f"a hunk at line {start} of {path} does not match the file")
        result[at : at + len(old)] = new
        shift += len(new) - len(old)
    return result


def _no_newline_markers(body: list[str], old: list[str], new: list[str]):
    """Drop the newline of the line before each `\\ No newline at end of file` marker."""
    old, new = list(old), list(new)
    for index, line in enumerate(body):
        if not line.startswith("\\") or index == 0:
            continue
        before = body[index - 1]
        side = [old] if before[:1] == "-" else [new] if before[:1] == "+" else [old, new]
        for lines in side:
            if lines:
                lines[-1] = lines[-1].rstrip("\r\n")
    return old, new


def _find(lines: list[str], block: list[str], near: int) -> int | None:
    """Where `block` stands in `lines`, searching outward from `near`."""
    for distance in range(len(lines) + 1):
        for at in {near - distance, near + distance}:
            if 0 <= at <= len(lines) - len(block) and lines[at : at + len(block)] == block:
                return at
    return None
