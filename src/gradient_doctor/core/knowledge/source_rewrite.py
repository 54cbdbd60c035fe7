"""Find a call or an operator in one line of the user's code, to rewrite it into a fix."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

_PAIRS = {"(": ")", "[": "]", "{": "}"}
_QUOTES = "'\""
_NAME = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*=(?!=)")
_IDENTIFIER = re.compile(r"^[A-Za-z_][\w.]*$")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_KEYWORD = re.compile(r"^([A-Za-z_]\w*)\s*=(?!=)\s*(.*)$", re.DOTALL)

@dataclass(frozen=True)
class Call:
    """One function call found in a line of code.

    Attributes:
        prefix: the module path written before the name, e.g. "tf.math." or "K.".
        name: the function name, e.g. "exp".
        args: the positional arguments, as written.
        kwargs: the keyword arguments, as (keyword, text) pairs.
        start: index of the call's first character in the line.
        end: index just past its closing parenthesis.
        text: the call as written, e.g. "tf.exp(scores)".
    """

    prefix: str
    name: str
    args: tuple[str, ...]
    kwargs: tuple[tuple[str, str], ...]
    start: int
    end: int
    text: str

    def argument(self, position: int, keyword: str) -> str | None:
        """Return the argument passed at `position` or as `keyword`, if any."""
        if position < len(self.args):
            return self.args[position]
        return dict(self.kwargs).get(keyword)

    def with_argument(self, position: int, text: str) -> str:
        """The call, rewritten with its positional argument `position` set to `text`."""
        args = list(self.args)
        args[position] = text
        return self.render(tuple(args))

    def render(self, args: tuple[str, ...]) -> str:
        """The call with `args` as its positional arguments and its own keywords."""
        parts = list(args) + [f"{keyword}={value}" for keyword, value in self.kwargs]
        return f"{self.prefix}{self.name}({', '.join(parts)})"


@dataclass(frozen=True)
class Binary:
    """Both operands of a binary operator found in a line of code, and where it stands."""

    left: str
    right: str
    start: int
    end: int
    text: str


def assigned_name(code: str) -> str | None:
    """Return the name a line assigns to (`w` in `w = tf.exp(s)`), or None."""
    match = _NAME.match(code)
    return match.group(1) if match else None


def is_identifier(text: str) -> bool:
    """True when `text` is a plain (dotted) name that can be assigned to."""
    return bool(_IDENTIFIER.match(text))


def replace_span(code: str, start: int, end: int, text: str) -> str:
    """Return `code` with `code[start:end]` replaced by `text`."""
    return code[:start] + text + code[end:]


def find_call(code: str, names: Iterable[str]) -> Call | None:
    """Find the first call in `code` of a function named one of `names`.

    Any module prefix matches: "exp" finds `tf.exp(`, `tf.math.exp(`, `K.exp(`,
    `keras.ops.exp(` and `np.exp(`, but not `safe_exp(`.
    """
    alternatives = "|".join(re.escape(name) for name in names)
    pattern = re.compile(rf"(?<![\w.])((?:[A-Za-z_]\w*\.)*)({alternatives})\s*\(")
    for match in pattern.finditer(code):
        close = _matching_close(code, match.end() - 1)
        if close is None:
            continue
        args, kwargs = _split_arguments(code[match.end() : close])
        start, end = match.start(), close + 1
        return Call(match.group(1), match.group(2), args, kwargs, start, end, code[start:end])
    return None


def rewrite_argument(
    code: str, names: Iterable[str], position: int, wrap: Callable[[Call, str], str]
) -> str | None:
    """Rewrite one argument of the first call to `names` on the line.

    Args:
        code: str, the user's line.
        names: the function names to look for, e.g. ("log",).
        position: int, which positional argument to rewrite.
        wrap: builds the new argument from the call and the old argument's text.

    Returns:
        The rewritten line, or None when the line has no such call or argument.
    """
    call = find_call(code, names)
    if call is None or position >= len(call.args):
        return None
    new_call = call.with_argument(position, wrap(call, call.args[position]))
    return replace_span(code, call.start, call.end, new_call)


def find_binary(code: str, operator: str) -> Binary | None:
    """Find the first use of `operator` ("/", "//" or "**") and its two operands."""
    for index in _operator_positions(code, operator):
        start = _operand_start(code, index)
        end = _operand_end(code, index + len(operator))
        left = code[start:index].strip()
        right = code[index + len(operator) : end].strip()
        if left and right:
            return Binary(left, right, start, end, code[start:end])
    return None


def _matching_close(code: str, open_index: int) -> int | None:
    """Index of the bracket that closes the one at `open_index`, skipping strings."""
    stack: list[str] = []
    quote = ""
    for index in range(open_index, len(code)):
        char = code[index]
        if quote:
            quote = "" if char == quote else quote
        elif char in _QUOTES:
            quote = char
        elif char in _PAIRS:
            stack.append(_PAIRS[char])
        elif stack and char == stack[-1]:
            stack.pop()
            if not stack:
                return index
    return None


def _split_arguments(text: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Split a call's argument text at its top-level commas."""
    parts: list[str] = []
    depth, start, quote = 0, 0, ""
    for index, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in _QUOTES:
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    args: list[str] = []
    kwargs: list[tuple[str, str]] = []
    for part in (p.strip() for p in parts):
        keyword = _KEYWORD.match(part)
        if keyword:
            kwargs.append((keyword.group(1), keyword.group(2).strip()))
        elif part:
            args.append(part)
    return tuple(args), tuple(kwargs)


def _operator_positions(code: str, operator: str) -> Iterable[int]:
    """Yield where `operator` stands alone (not inside `//`, `**=` or a string)."""
    quote = ""
    for index, char in enumerate(code):
        if quote:
            quote = "" if char == quote else quote
        elif char in _QUOTES:
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
            close = _matching_close(code, position)
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
