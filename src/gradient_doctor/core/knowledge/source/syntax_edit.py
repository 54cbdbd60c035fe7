"""Edit one call in a user's file through its syntax tree: set or add an argument, replace a node.

The rewrites of a fix's patch touch only the text of the nodes they change (the
user's formatting, comments and other arguments stay as written). Positions come
from Python's `ast` (columns are UTF-8 byte offsets).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from gradient_doctor.core.findings import Edit, SourceLine


def parse(lines: Sequence[str]) -> tuple[ast.Module | None, list[str]]:
    text = [line.rstrip("\r\n") for line in lines]
    try:
        return ast.parse("\n".join(text)), text
    except SyntaxError:
        return None, text


def calls_on(tree: ast.Module, source: SourceLine) -> list[ast.Call]:
    """The calls that lie on the lines of `source` (its first line to its `end_line`)."""
    first, last = source.line, source.end_line or source.line
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and first <= node.lineno and node.end_lineno <= last
    ]


def fit_call(tree: ast.Module, source: SourceLine) -> ast.Call | None:
    """The `fit(...)` call on the lines of `source`, or None."""
    return next((c for c in calls_on(tree, source) if callee(c.func) == "fit"), None)


def callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def argument(call: ast.Call, position: int | None, keyword: str) -> ast.expr | None:
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    if position is not None and position < len(call.args):
        return call.args[position]
    return None


def keras_spelling(tree: ast.Module, path: str) -> str | None:
    """How the file can name `keras.<path>`: through `keras` or `tf.keras`; None when it
    imports neither."""
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    if "keras" in names:
        return f"keras.{path}"
    if "tf" in names:
        return f"tf.keras.{path}"
    return None


def module_alias(tree: ast.Module, module: str) -> str | None:
    """The name the file gives `module` (`tf` for `import tensorflow as tf`); None when
    it does not import the module itself."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == module:
                    return alias.asname or alias.name
    return None


def set_keyword(text: list[str], call: ast.Call, keyword: str, value: str, file: str) -> Edit:
    """An edit passing `keyword=value` to `call`, replacing the keyword's value if given."""
    existing = next((k for k in call.keywords if k.arg == keyword), None)
    if existing is not None:
        return replace_node(text, existing.value, value, file)
    return add_keyword(text, call, f"{keyword}={value}", file)


def number(node: ast.expr) -> float | None:
    """The value of a numeric literal (a negative one too), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return None if isinstance(node.value, bool) else float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = number(node.operand)
        return None if inner is None else -inner
    return None


def literal(value: float) -> str:
    """A number as a Python literal with 4 significant digits: 0.005, 1.164e-05, 2.0."""
    text = f"{value:.4g}"
    return text if any(c in text for c in ".en") else f"{text}.0"


def rounded(value: float) -> float:
    """`value` as an edit writes it (`literal`), so that a trial runs the same number."""
    return float(literal(value))


# -- text edits ---------------------------------------------------------------------------


def segment(text: list[str], node: ast.AST) -> str:
    """The source text of `node` (columns are UTF-8 byte offsets, as `ast` gives them)."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        return _cut(text[first], node.col_offset, node.end_col_offset)
    parts = [_cut(text[first], node.col_offset, None)]
    parts += text[first + 1 : last]
    parts.append(_cut(text[last], 0, node.end_col_offset))
    return "\n".join(parts)


def _cut(line: str, start: int | None, end: int | None) -> str:
    return line.encode("utf-8")[start:end].decode("utf-8")


def replace_node(text: list[str], node: ast.AST, new: str, file: str) -> Edit:
    """An edit replacing `node`'s text by `new` (the rest of its lines kept)."""
    return combined(text, node, [(node, new)], file)


def add_keyword(text: list[str], call: ast.Call, keyword: str, file: str) -> Edit:
    """An edit passing one more keyword argument to `call`, after its last argument."""
    return combined(text, call, [("add", keyword)], file)


def combined(text: list[str], outer: ast.AST, changes: list, file: str) -> Edit:
    """One edit of `outer`'s lines making every change: (node, new text), or ("add",
    keyword) appended after the call's last argument (inside its brackets)."""
    first, last = outer.lineno - 1, outer.end_lineno - 1
    region = "\n".join(text[first : last + 1]).encode("utf-8")
    offsets = _line_offsets(text[first : last + 1])

    def at(line: int, column: int) -> int:
        return offsets[line - 1 - first] + column

    spans = []
    for node, new in changes:
        if node == "add":
            arguments = list(outer.args) + list(outer.keywords)
            if arguments:
                end = max(arguments, key=lambda a: (a.end_lineno, a.end_col_offset))
                position = at(end.end_lineno, end.end_col_offset)
                spans.append((position, position, f", {new}"))
            else:
                position = at(outer.end_lineno, outer.end_col_offset) - 1  # before ")"
                spans.append((position, position, new))
        else:
            spans.append(
                (at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset), new)
            )
    for start, end, new in sorted(spans, reverse=True):
        region = region[:start] + new.encode("utf-8") + region[end:]
    new_lines = tuple(region.decode("utf-8").split("\n"))
    return Edit(file, first + 1, last + 1, new_lines, tuple(text[first : last + 1]))


def _line_offsets(lines: Sequence[str]) -> list[int]:
    """Byte offset of each line's start in the lines joined by newlines."""
    offsets, total = [], 0
    for line in lines:
        offsets.append(total)
        total += len(line.encode("utf-8")) + 1
    return offsets
