"""Find a binary operator (/, //, **) and both its operands in one line of the user's code."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gradient_doctor.core.knowledge.source.calls import QUOTES, matching_close, nearest

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Binary:
    """Both operands of a binary operator found in a line of code, and where it stands."""

    left: str
    right: str
    start: int
    end: int
    text: str


def find_binary(code: str, operator: str, focus: tuple[int, int] | None = None) -> Binary | None:
    """Find a use of `operator` ("/", "//" or "**") and its two operands.

    Args:
        code: str, one line of the user's code.
        operator: str, the operator.
        focus: (start, end) of the expression that made the op, as the replay saw
            it; the use at (or around, or inside) it is taken, as `find_call` does.
            None takes the first use on the line.
    """
    found = list(_binaries(code, operator))
    if focus is None or not found:
        return found[0] if found else None
    return nearest(found, focus)


def _binaries(code: str, operator: str) -> Iterable[Binary]:
    """Every use of `operator` on the line with both operands, in order."""
    for index in _operator_positions(code, operator):
        start = _operand_start(code, index)
        end = _operand_end(code, index + len(operator))
        left = code[start:index].strip()
        right = code[index + len(operator) : end].strip()
        if left and right:
            yield Binary(left, right, start, end, code[start:end])


def _operator_positions(code: str, operator: str) -> Iterable[int]:
    """Yield where `operator` stands alone (not inside `//`, `**=` or a string)."""
    quote = ""
    for index, char in enumerate(code):
        if quote:
            quote = "" if char == quote else quote
        elif char in QUOTES:
            quote = char
        elif code.startswith(operator, index):
            before = code[index - 1] if index else ""
            after = code[index + len(operator) : index + len(operator) + 1]
            if before != operator[0] and after not in (operator[0], "="):
                yield index


def _operand_start(code: str, index: int) -> int:
    """Start of the operand that ends just before `index`."""
    position = index - 1
    while position >= 0 and code[position] == " ":
        position -= 1
    while position >= 0:
        char = code[position]
        if char in ")]":
            position = _matching_open(code, position) - 1
        elif char.isalnum() or char in "_.":
            position -= 1
        else:
            break
    return position + 1


def _operand_end(code: str, index: int) -> int:
    """End of the operand that starts at or after `index`."""
    position = index
    while position < len(code) and code[position] == " ":
        position += 1
    number = _NUMBER.match(code, position)
    if number:
        return number.end()
    if position < len(code) and code[position] in "-+":
        position += 1
    while position < len(code):
        char = code[position]
        if char in "([":
            close = matching_close(code, position)
            position = len(code) if close is None else close + 1
        elif char.isalnum() or char in "_.":
            position += 1
        else:
            break
    return position


def _matching_open(code: str, close_index: int) -> int:
    """Index of the bracket that opens the one at `close_index` (0 when unbalanced)."""
    depth = 0
    for index in range(close_index, -1, -1):
        if code[index] in ")]}":
            depth += 1
        elif code[index] in "([{":
            depth -= 1
            if depth == 0:
                return index
    return 0
