"""Rewrite the line that builds the user's optimizer: a lower learning rate, clipping.

The edits are made on the user's own call, in the user's own terms: `SGD(args.lr)`
becomes `SGD(args.lr * 0.1)`, a literal `0.05` becomes `0.005`, a learning-rate
schedule built a few lines up has its learning-rate arguments scaled where it is
built, and `compile(optimizer="adam")` gets the optimizer written out. Each edit
comes with the change a trial must make to run exactly what it says (`Setting`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from gradient_doctor.core.findings import Edit, SourceLine

# Keras's learning-rate schedules: the arguments that are learning rates (position,
# keyword) and, where a rate has a default, that default (it must be scaled too).
_SCHEDULE_RATES: dict[str, tuple[tuple[int | None, str, float | None], ...]] = {
    "ExponentialDecay": ((0, "initial_learning_rate", None),),
    "InverseTimeDecay": ((0, "initial_learning_rate", None),),
    "CosineDecay": ((0, "initial_learning_rate", None), (4, "warmup_target", None)),
    "CosineDecayRestarts": ((0, "initial_learning_rate", None),),
    "PiecewiseConstantDecay": ((1, "values", None),),
    "PolynomialDecay": ((0, "initial_learning_rate", None), (2, "end_learning_rate", 0.0001)),
}
# `compile(optimizer="...")` names -> the class Keras builds.
_OPTIMIZER_NAMES = {
    "adam": "Adam",
    "adamw": "AdamW",
    "sgd": "SGD",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
    "adadelta": "Adadelta",
    "adamax": "Adamax",
    "nadam": "Nadam",
    "ftrl": "Ftrl",
    "lion": "Lion",
}


@dataclass(frozen=True)
class Setting:
    """The change a trial makes so that it runs what an edit writes.

    Attributes:
        name: "learning_rate" (set to `value`), "learning_rate_scale" (a schedule's
            output multiplied by `value`), "global_clipnorm" or "clipvalue".
        value: the number, exactly as the edit writes it.
    """

    name: str
    value: float


@dataclass(frozen=True)
class OptimizerSite:
    """The user's optimizer, as a fix to it needs to know it.

    Attributes:
        source: the line (or lines) that built it.
        class_name: its class, e.g. "SGD".
        learning_rate: its learning rate when that is a fixed number, else None.
        schedule: True when its learning rate is a schedule.
    """

    source: SourceLine
    class_name: str
    learning_rate: float | None = None
    schedule: bool = False


def lower_learning_rate(
    site: OptimizerSite, lines: Sequence[str], factor: float = 0.1
) -> tuple[tuple[Edit, ...], Setting] | None:
    """Edits that divide the optimizer's learning rate, and the trial's setting; or None.

    Args:
        site: where and what the optimizer is.
        lines: the file's lines (with or without line endings).
        factor: the new rate over the old.

    Returns:
        None when the line does not hold a call the doctor can rewrite exactly (the
        optimizer built elsewhere, a schedule of a class it does not know).
    """
    tree, text = _parse(lines)
    if tree is None:
        return None
    call, named = _optimizer_call(tree, site)
    if named is not None:  # compile(optimizer="adam"): write the optimizer out
        if site.learning_rate is None:
            return None
        value = _rounded(site.learning_rate * factor)
        spelled = _optimizer_spelling(tree, site.class_name)
        if spelled is None:
            return None
        new = f"{spelled}(learning_rate={format_number(value)})"
        return (_replace(text, named, new, site.source.file),), Setting("learning_rate", value)
    if call is None:
        return None
    rate = _argument(call, 0, "learning_rate")
    if site.schedule:
        schedule = _schedule_call(tree, rate, site.source.line) if rate is not None else None
        if schedule is None:
            return None
        edits = _scale_schedule(text, schedule, factor, site.source.file)
        return (edits, Setting("learning_rate_scale", factor)) if edits else None
    if site.learning_rate is None:
        return None
    value = _rounded(site.learning_rate * factor)
    if rate is None:
        edit = _add_keyword(text, call, f"learning_rate={format_number(value)}", site.source.file)
        return (edit,), Setting("learning_rate", value)
    if _number(rate) is not None:
        new = format_number(value)
        return (_replace(text, rate, new, site.source.file),), Setting("learning_rate", value)
    # An expression (`args.lr`, `LR`): scaled as written, the trial scales it alike.
    new = f"{_segment(text, rate)} * {format_number(factor)}"
    if not isinstance(rate, ast.Name | ast.Attribute | ast.Call | ast.Subscript):
        new = f"({_segment(text, rate)}) * {format_number(factor)}"
    return (_replace(text, rate, new, site.source.file),), Setting(
        "learning_rate", site.learning_rate * factor
    )


def set_clipping(
    site: OptimizerSite, lines: Sequence[str], keyword: str, value: float
) -> tuple[tuple[Edit, ...], Setting] | None:
    """Edits that pass `keyword=value` (e.g. `global_clipnorm=0.6`) to the optimizer.

    The value is written with 3 significant digits and the setting holds it as
    written. None when the line holds no optimizer call to rewrite.
    """
    tree, text = _parse(lines)
    if tree is None:
        return None
    call, named = _optimizer_call(tree, site)
    written = format_number(value)
    number = float(written)
    if named is not None:
        spelled = _optimizer_spelling(tree, site.class_name)
        if spelled is None:
            return None
        new = f"{spelled}({keyword}={written})"
        return (_replace(text, named, new, site.source.file),), Setting(keyword, number)
    if call is None:
        return None
    existing = next((k for k in call.keywords if k.arg == keyword), None)
    if existing is not None:
        edit = _replace(text, existing.value, written, site.source.file)
    else:
        edit = _add_keyword(text, call, f"{keyword}={written}", site.source.file)
    return (edit,), Setting(keyword, number)


# -- finding the call -----------------------------------------------------------------


def _parse(lines: Sequence[str]) -> tuple[ast.Module | None, list[str]]:
    text = [line.rstrip("\r\n") for line in lines]
    try:
        return ast.parse("\n".join(text)), text
    except SyntaxError:
        return None, text


def _optimizer_call(
    tree: ast.Module, site: OptimizerSite
) -> tuple[ast.Call | None, ast.AST | None]:
    """The optimizer's constructor call on the site's lines, or the string naming it in
    a `compile(optimizer=...)` there; (None, None) when neither is found."""
    first = site.source.line
    last = site.source.end_line or first
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and first <= node.lineno and node.end_lineno <= last
    ]
    for call in calls:
        if _callee(call.func) == site.class_name:
            return call, None
    for call in calls:
        for keyword in call.keywords:
            value = keyword.value
            if keyword.arg == "optimizer" and isinstance(value, ast.Constant):
                if _OPTIMIZER_NAMES.get(str(value.value).lower()) == site.class_name:
                    return None, value
    return None, None


def _callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _argument(call: ast.Call, position: int | None, keyword: str) -> ast.expr | None:
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    if position is not None and position < len(call.args):
        return call.args[position]
    return None


def _optimizer_spelling(tree: ast.Module, class_name: str) -> str | None:
    """How the file can name the optimizer class: through `keras` or `tf.keras`."""
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    if "keras" in names:
        return f"keras.optimizers.{class_name}"
    if "tf" in names:
        return f"tf.keras.optimizers.{class_name}"
    return None


def _schedule_call(tree: ast.Module, rate: ast.expr, before_line: int) -> ast.Call | None:
    """The schedule call behind the learning-rate argument: written in place, or the
    nearest assignment to its name above the optimizer's line."""
    if isinstance(rate, ast.Call):
        return rate if _callee(rate.func) in _SCHEDULE_RATES else None
    if not isinstance(rate, ast.Name):
        return None
    assigned = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and node.lineno < before_line
        and any(isinstance(t, ast.Name) and t.id == rate.id for t in node.targets)
    ]
    if not assigned:
        return None
    value = max(assigned, key=lambda node: node.lineno)
    return value if isinstance(value, ast.Call) and _callee(value.func) in _SCHEDULE_RATES else None


def _scale_schedule(
    text: list[str], schedule: ast.Call, factor: float, file: str
) -> tuple[Edit, ...] | None:
    """Edits multiplying every learning rate a schedule is built with by `factor`."""
    edits = []
    for position, keyword, default in _SCHEDULE_RATES[_callee(schedule.func)]:
        node = _argument(schedule, position, keyword)
        if node is None:
            if default is None:
                continue
            spelled = f"{keyword}={format_number(_rounded(default * factor))}"
            edits.append(("add", spelled))
            continue
        scaled = _scaled(text, node, factor)
        if scaled is None:
            return None
        edits.append((node, scaled))
    if not edits:
        return None
    return (_combined(text, schedule, edits, file),)


def _scaled(text: list[str], node: ast.expr, factor: float) -> str | None:
    """The expression `node` times `factor`, as the user would write it."""
    number = _number(node)
    if number is not None:
        return format_number(_rounded(number * factor))
    if isinstance(node, ast.List | ast.Tuple):
        parts = [_scaled(text, item, factor) for item in node.elts]
        if any(part is None for part in parts):
            return None
        open_, close = ("[", "]") if isinstance(node, ast.List) else ("(", ")")
        return open_ + ", ".join(parts) + ("," if len(parts) == 1 and close == ")" else "") + close
    source = _segment(text, node)
    if isinstance(node, ast.Name | ast.Attribute | ast.Call | ast.Subscript):
        return f"{source} * {format_number(factor)}"
    return f"({source}) * {format_number(factor)}"


def _number(node: ast.expr) -> float | None:
    """The value of a numeric literal (a negative one too), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return None if isinstance(node.value, bool) else float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    return None


def format_number(value: float) -> str:
    """A number as a Python literal with 4 significant digits: 0.005, 1.164e-05, 2.0."""
    text = f"{value:.4g}"
    return text if any(c in text for c in ".en") else f"{text}.0"


def _rounded(value: float) -> float:
    """`value` as the edit writes it (`format_number`), so the trial runs the same number."""
    return float(format_number(value))


# -- text edits ---------------------------------------------------------------------------


def _segment(text: list[str], node: ast.AST) -> str:
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


def _replace(text: list[str], node: ast.AST, new: str, file: str) -> Edit:
    """An edit replacing `node`'s text by `new` (the rest of its lines kept)."""
    return _combined(text, node, [(node, new)], file)


def _add_keyword(text: list[str], call: ast.Call, keyword: str, file: str) -> Edit:
    """An edit passing one more keyword argument to `call`, after its last argument."""
    return _combined(text, call, [("add", keyword)], file)


def _combined(text: list[str], outer: ast.AST, changes: list, file: str) -> Edit:
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
