"""Find a call and its arguments in one line of the user's code, to rewrite it into a fix."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_PAIRS = {"(": ")", "[": "]", "{": "}"}
QUOTES = "'\""
_NAME = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*=(?!=)")
_IDENTIFIER = re.compile(r"^[A-Za-z_][\w.]*$")
_KEYWORD = re.compile(r"^([A-Za-z_]\w*)\s*=(?!=)\s*(.*)$", re.DOTALL)
_NUMBER = re.compile(r"^\d[\d_]*(\.\d*)?([eE][-+]?\d+)?$|^\.\d+([eE][-+]?\d+)?$")


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
class MethodCall:
    """One method call on a tensor found in a line of code: `p.log()`, `s.pow(0.5)`,
    `(g ** 2).sum(dim=1).sqrt()`.

    Attributes:
        receiver: the expression the method is called on, as written.
        name: the method's name, e.g. "sqrt".
        args: the positional arguments, as written.
        kwargs: the keyword arguments, as (keyword, text) pairs.
        start: index of the receiver's first character in the line.
        end: index just past the call's closing parenthesis.
    """

    receiver: str
    name: str
    args: tuple[str, ...]
    kwargs: tuple[tuple[str, str], ...]
    start: int
    end: int

    def render(self, receiver: str, args: tuple[str, ...]) -> str:
        """The call on `receiver` (bracketed when it is no single operand) with `args`."""
        parts = list(args) + [f"{keyword}={value}" for keyword, value in self.kwargs]
        return f"{grouped(receiver)}.{self.name}({', '.join(parts)})"


# The roots of the array namespaces a call may be written in (`tf.math.log(x)`,
# `torch.sqrt(x)`, `F.softplus(x)`): a dotted prefix with any other root is a tensor's
# method (`p.log()`, `self.scale.exp()`), whose operand is what it is called on.
NAMESPACE_ROOTS = frozenset(
    {"tf", "torch", "np", "numpy", "F", "nn", "K", "keras", "ops", "math", "jnp", "jax"}
    | {"scipy", "special", "backend", "functional", "tnp", "random"}
)


def is_namespace(prefix: str) -> bool:
    """Whether a call's prefix ("tf.math.", "", "p.") names a module: no prefix (a
    function imported by name) or one whose root is an array namespace."""
    return not prefix or prefix.split(".")[0] in NAMESPACE_ROOTS


def find_method_call(
    code: str, names: Iterable[str], focus: tuple[int, int] | None = None
) -> MethodCall | None:
    """Find the method call in `code` of a method named one of `names` on a tensor
    (not a module: `torch.sqrt(x)` is a function call, `find_call`'s): the one at
    `focus` as `find_call` picks, else the first."""
    alternatives = "|".join(re.escape(name) for name in names)
    calls = []
    for match in re.finditer(rf"\.\s*({alternatives})\s*\(", code):
        start = _receiver_start(code, match.start())
        close = matching_close(code, match.end() - 1)
        if start is None or close is None:
            continue
        receiver = code[start : match.start()]
        if is_identifier(receiver) and is_namespace(receiver + "."):
            continue
        args, kwargs = _split_arguments(code[match.end() : close])
        calls.append(MethodCall(receiver, match.group(1), args, kwargs, start, close + 1))
    if focus is None or not calls:
        return calls[0] if calls else None
    return nearest(calls, focus)


def _receiver_start(code: str, dot: int) -> int | None:
    """Where the expression that ends just before `code[dot]` (a method's dot) starts:
    a chain of names, calls, indexings and bracketed groups joined by dots; None when
    no such expression ends there."""
    index = dot
    while True:
        if index > 0 and code[index - 1] in ")]":
            opening = _matching_open(code, index - 1)
            if opening is None:
                return None
            index = opening
        while index > 0 and (code[index - 1].isalnum() or code[index - 1] == "_"):
            index -= 1
        if index == dot or code[index:dot][:1].isdigit():
            return None
        if index > 0 and code[index - 1] == "." and index > 1:
            index -= 1
            continue
        return index


def _matching_open(code: str, close_index: int) -> int | None:
    """Index of the bracket that opens the one at `close_index` (strings not skipped:
    a method's receiver rarely holds one)."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for index in range(close_index, -1, -1):
        char = code[index]
        if char in pairs:
            stack.append(pairs[char])
        elif stack and char == stack[-1]:
            stack.pop()
            if not stack:
                return index
    return None


def grouped(text: str) -> str:
    """`text` as one operand: a name, a number, a call or an index of one, or a
    bracketed whole, as written; anything else in brackets."""
    text = text.strip()
    head = text
    while head.endswith((")", "]")):  # a call or an index: `b.sum(1)`, `norms[i]`
        opening = next(
            (
                i
                for i, char in enumerate(head)
                if char in "([" and matching_close(head, i) == len(head) - 1
            ),
            None,
        )
        if opening is None or opening == 0:
            break
        head = head[:opening]
    if head.replace(".", "").replace("_", "").isalnum() or _NUMBER.match(text):
        return text
    if text.startswith("(") and matching_close(text, 0) == len(text) - 1:
        return text
    return f"({text})"


def assigned_name(code: str) -> str | None:
    """Return the name a line assigns to (`w` in `w = tf.exp(s)`), or None."""
    match = _NAME.match(code)
    return match.group(1) if match else None


def is_identifier(text: str) -> bool:
    """True when `text` is a plain (dotted) name that can be assigned to."""
    return bool(_IDENTIFIER.match(text))


def parses(text: str, mode: str = "exec") -> bool:
    """Whether `text` parses: a statement of its own (not one line of a longer one), or
    in "eval" mode an expression."""
    try:
        ast.parse(text, mode=mode)
    except SyntaxError:
        return False
    return True


def replace_span(code: str, start: int, end: int, text: str) -> str:
    """Return `code` with `code[start:end]` replaced by `text`."""
    return code[:start] + text + code[end:]


def find_call(code: str, names: Iterable[str], focus: tuple[int, int] | None = None) -> Call | None:
    """Find the call in `code` of a function named one of `names`: the one at `focus`.

    Any module prefix matches: "exp" finds `tf.exp(`, `tf.math.exp(`, `K.exp(`,
    `keras.ops.exp(` and `np.exp(`, but not `safe_exp(`.

    Args:
        code: str, one line of the user's code.
        names: the function names to look for.
        focus: (start, end) of the expression that made the op on this line, as the
            replay saw it, or None. Of several calls on the line, the one at the focus
            is taken, else the innermost one around it, else the first one inside it,
            else none (the op came from another expression on the line, a library
            call say, and rewriting a call elsewhere would change the wrong code).
            Without a focus, the first call on the line.

    Returns:
        The `Call`, or None when the line has no such call.
    """
    calls = list(_calls(code, names))
    if focus is None or not calls:
        return calls[0] if calls else None
    return nearest(calls, focus)


def nearest(spans: list, focus: tuple[int, int]):
    """Of items with `start`/`end` offsets, the one at `focus`: the innermost around it,
    else the first inside it, else None."""
    start, end = focus
    around = [s for s in spans if s.start <= start and end <= s.end]
    if around:
        return min(around, key=lambda s: s.end - s.start)
    inside = [s for s in spans if start <= s.start and s.end <= end]
    return inside[0] if inside else None


def find_calls(code: str, names: Iterable[str]) -> list[Call]:
    """Every call in `code` of a function named one of `names`, in order (calls nested
    in another's arguments included)."""
    return list(_calls(code, names))


def _calls(code: str, names: Iterable[str]) -> Iterator[Call]:
    """Every call in `code` of a function named one of `names`, in order."""
    alternatives = "|".join(re.escape(name) for name in names)
    pattern = re.compile(rf"(?<![\w.])((?:[A-Za-z_]\w*\.)*)({alternatives})\s*\(")
    for match in pattern.finditer(code):
        close = matching_close(code, match.end() - 1)
        if close is None:
            continue
        args, kwargs = _split_arguments(code[match.end() : close])
        start, end = match.start(), close + 1
        yield Call(match.group(1), match.group(2), args, kwargs, start, end, code[start:end])


def matching_close(code: str, open_index: int) -> int | None:
    """Index of the bracket that closes the one at `open_index`, skipping strings."""
    stack: list[str] = []
    quote = ""
    for index in range(open_index, len(code)):
        char = code[index]
        if quote:
            quote = "" if char == quote else quote
        elif char in QUOTES:
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
        elif char in QUOTES:
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
