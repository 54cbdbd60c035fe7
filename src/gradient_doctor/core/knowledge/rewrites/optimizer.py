"""Rewrite the line that builds the user's optimizer: a lower learning rate, clipping.

The edits are made on the user's own call, in the user's own terms: `SGD(args.lr)`
becomes `SGD(args.lr * 0.1)`, a literal `0.05` becomes `0.005`, a learning-rate
schedule built a few lines up has its learning-rate arguments scaled where it is
built, and `compile(optimizer="adam")` gets the optimizer written out. Each edit
comes with the change a trial must make to run exactly what it says (`Setting`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gradient_doctor.core.findings import Edit, SourceLine
from gradient_doctor.core.knowledge.source.syntax_edit import (
    add_keyword,
    argument,
    callee,
    calls_on,
    combined,
    keras_spelling,
    literal,
    number,
    parse,
    replace_node,
    rounded,
    segment,
    set_keyword,
)

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
# A keyword of the user's own schedule class that names a learning rate (`peak_lr`,
# `max_lr`, `base_lr`, `initial_learning_rate`, `target_rate`, a warm-up's `peak` or
# `peak_value`): where every such keyword is passed a number, the schedule is scaled by
# scaling them.
_RATE_KEYWORD = re.compile(r"(^|_)(lr|learning_rate|rate|peak)(_|$)")
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
class SchedulerSite:
    """PyTorch: a learning-rate scheduler stepping the optimizer, where the user built it.

    Attributes:
        source: the user's call that built it.
        class_name: its class as the call names it, e.g. "OneCycleLR".
        kind: the `torch.optim.lr_scheduler` class it is or derives from (a user's
            subclass of `OneCycleLR`: "OneCycleLR"), which says how it sets the rate.
    """

    source: SourceLine
    class_name: str
    kind: str


@dataclass(frozen=True)
class OptimizerSite:
    """The user's optimizer, as a fix to it needs to know it.

    Attributes:
        source: the line (or lines) that built it.
        class_name: its class, e.g. "SGD".
        learning_rate: its learning rate when that is a fixed number, else None.
            PyTorch: its `lr` as constructed; under a scheduler that sets the rates
            itself (`OneCycleLR`), the rate in use when the site was taken.
        schedule: True when its learning rate is a schedule.
        framework: "tf" or "torch": PyTorch's are rewritten by `torch_optimizer`.
        step_line: PyTorch: the user's line of the optimizer's `step()`, where a
            clipping line goes; None when unknown.
        param_groups: PyTorch: how many param groups it was built with (the
            constructor's first argument is a list of tensors only with one).
        params_iterator: PyTorch: the constructor was given a one-shot iterator (a
            name holding `model.parameters()` is empty when read again).
        step_shared: PyTorch: another optimizer steps on the same line (a loop over
            optimizers), so a clipping line there must clip the one stepping.
        schedulers: PyTorch: the learning-rate schedulers built on it, in order.
        group_rates: PyTorch: each param group's learning rate as constructed (None
            for one that is not a number); () when unknown.
    """

    source: SourceLine
    class_name: str
    learning_rate: float | None = None
    schedule: bool = False
    framework: str = "tf"
    step_line: SourceLine | None = None
    param_groups: int = 1
    params_iterator: bool = False
    step_shared: bool = False
    schedulers: tuple[SchedulerSite, ...] = ()
    group_rates: tuple[float | None, ...] = ()


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
    tree, text = parse(lines)
    if tree is None:
        return None
    call, named = optimizer_call(tree, site)
    if named is not None:  # compile(optimizer="adam"): write the optimizer out
        if site.learning_rate is None:
            return None
        value = rounded(site.learning_rate * factor)
        spelled = keras_spelling(tree, f"optimizers.{site.class_name}")
        if spelled is None:
            return None
        new = f"{spelled}(learning_rate={literal(value)})"
        return (replace_node(text, named, new, site.source.file),), Setting("learning_rate", value)
    if call is None:
        return None
    rate = argument(call, 0, "learning_rate")
    if site.schedule:
        schedule = _schedule_call(tree, rate, site.source.line) if rate is not None else None
        if schedule is None:
            return None
        edits = _scale_schedule(text, schedule, factor, site.source.file)
        return (edits, Setting("learning_rate_scale", factor)) if edits else None
    if site.learning_rate is None:
        return None
    value = rounded(site.learning_rate * factor)
    if rate is None:
        edit = add_keyword(text, call, f"learning_rate={literal(value)}", site.source.file)
        return (edit,), Setting("learning_rate", value)
    if number(rate) is not None:
        # The literal as written, scaled: a schedule or callback may have moved the rate
        # in use (`value`, what the trial sets at the failing step) far from it.
        new = literal(rounded(number(rate) * factor))
        return (replace_node(text, rate, new, site.source.file),), Setting("learning_rate", value)
    # An expression (`args.lr`, `LR`): scaled as written, the trial scales it alike.
    new = f"{segment(text, rate)} * {literal(factor)}"
    if not isinstance(rate, ast.Name | ast.Attribute | ast.Call | ast.Subscript):
        new = f"({segment(text, rate)}) * {literal(factor)}"
    return (replace_node(text, rate, new, site.source.file),), Setting(
        "learning_rate", site.learning_rate * factor
    )


def built_learning_rate(site: OptimizerSite, lines: Sequence[str]) -> float | None:
    """The learning rate the optimizer's line writes as a number, or None (an expression,
    a schedule, or no such line)."""
    tree, _ = parse(lines)
    if tree is None:
        return None
    call, _ = optimizer_call(tree, site)
    rate = argument(call, 0, "learning_rate") if call is not None else None
    return number(rate) if rate is not None else None


def wrap_loss_scaling(site: OptimizerSite, lines: Sequence[str]) -> Edit | None:
    """An edit wrapping the optimizer the line builds in a dynamic `LossScaleOptimizer`.

    None when the line builds no optimizer call (a name in `compile` is written out
    first), or the file names neither `keras` nor `tf`.
    """
    tree, text = parse(lines)
    if tree is None:
        return None
    call, named = optimizer_call(tree, site)
    wrapper = keras_spelling(tree, "optimizers.LossScaleOptimizer")
    if wrapper is None or (call is None and named is None):
        return None
    inner = segment(text, call) if call is not None else None
    if inner is None:
        inner = f"{keras_spelling(tree, f'optimizers.{site.class_name}')}()"
    return replace_node(text, call or named, f"{wrapper}({inner})", site.source.file)


def set_clipping(
    site: OptimizerSite, lines: Sequence[str], keyword: str, value: float
) -> tuple[tuple[Edit, ...], Setting] | None:
    """Edits that pass `keyword=value` (e.g. `global_clipnorm=0.6`) to the optimizer.

    The value is written with 3 significant digits and the setting holds it as
    written. None when the line holds no optimizer call to rewrite.
    """
    tree, text = parse(lines)
    if tree is None:
        return None
    call, named = optimizer_call(tree, site)
    written = literal(value)
    exact = float(written)
    if named is not None:
        spelled = keras_spelling(tree, f"optimizers.{site.class_name}")
        if spelled is None:
            return None
        new = f"{spelled}({keyword}={written})"
        return (replace_node(text, named, new, site.source.file),), Setting(keyword, exact)
    if call is None:
        return None
    edit = set_keyword(text, call, keyword, written, site.source.file)
    return (edit,), Setting(keyword, exact)


# -- finding the call -----------------------------------------------------------------


def optimizer_call(tree: ast.Module, site: OptimizerSite) -> tuple[ast.Call | None, ast.AST | None]:
    """The optimizer's constructor call on the site's lines, or the string naming it in
    a `compile(optimizer=...)` there; (None, None) when neither is found."""
    calls = calls_on(tree, site.source)
    for call in calls:
        if callee(call.func) == site.class_name:
            return call, None
    for call in calls:
        for keyword in call.keywords:
            value = keyword.value
            if keyword.arg == "optimizer" and isinstance(value, ast.Constant):
                if _OPTIMIZER_NAMES.get(str(value.value).lower()) == site.class_name:
                    return None, value
    return None, None


def _schedule_call(tree: ast.Module, rate: ast.expr, before_line: int) -> ast.Call | None:
    """The schedule call behind the learning-rate argument: written in place, or the
    nearest assignment to its name above the optimizer's line."""
    if isinstance(rate, ast.Call):
        return rate if _schedule_rates(rate) else None
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
    return value if isinstance(value, ast.Call) and _schedule_rates(value) else None


def _schedule_rates(schedule: ast.Call) -> tuple[tuple[int | None, str, float | None], ...]:
    """The arguments of a schedule call that are learning rates: a Keras schedule's
    (`_SCHEDULE_RATES`), or the user's own schedule's keywords that name a rate, each
    passed a number (`WarmUp(peak_lr=20.0, warmup_steps=60)`: `peak_lr`); () for none.
    A rate passed by position to the user's class is not known to be one: then ()."""
    known = _SCHEDULE_RATES.get(callee(schedule.func))
    if known is not None:
        return known
    rates = tuple(
        (None, keyword.arg, None)
        for keyword in schedule.keywords
        if keyword.arg and _RATE_KEYWORD.search(keyword.arg) and _constant(keyword.value)
    )
    positional = any(number(arg) is not None for arg in schedule.args)
    return () if positional else rates


_ARITHMETIC = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


def _constant(node: ast.expr) -> float | None:
    """The value of a number written as a literal or as arithmetic on literals
    (`3e-3 * 256`, a rate scaled by hand for a batch size), else None."""
    value = number(node)
    if value is not None or not isinstance(node, ast.BinOp):
        return value
    operation = _ARITHMETIC.get(type(node.op))
    left, right = _constant(node.left), _constant(node.right)
    if operation is None or left is None or right is None:
        return None
    try:
        return float(operation(left, right))
    except ZeroDivisionError:
        return None


def _scale_schedule(
    text: list[str], schedule: ast.Call, factor: float, file: str
) -> tuple[Edit, ...] | None:
    """Edits multiplying every learning rate a schedule is built with by `factor`."""
    edits = []
    for position, keyword, default in _schedule_rates(schedule):
        node = argument(schedule, position, keyword)
        if node is None:
            if default is None:
                continue
            spelled = f"{keyword}={literal(rounded(default * factor))}"
            edits.append(("add", spelled))
            continue
        edits.append((node, scaled(text, node, factor)))
    if not edits:
        return None
    return (combined(text, schedule, edits, file),)


def scaled(text: list[str], node: ast.expr, factor: float) -> str:
    """The expression `node` times `factor`, as the user would write it: a literal
    divided, a list or tuple item by item, else the expression times the factor."""
    value = number(node)
    if value is not None:
        return literal(rounded(value * factor))
    if isinstance(node, ast.List | ast.Tuple):
        parts = [scaled(text, item, factor) for item in node.elts]
        open_, close = ("[", "]") if isinstance(node, ast.List) else ("(", ")")
        return open_ + ", ".join(parts) + ("," if len(parts) == 1 and close == ")" else "") + close
    source = segment(text, node)
    if isinstance(node, ast.Name | ast.Attribute | ast.Call | ast.Subscript):
        return f"{source} * {literal(factor)}"
    return f"({source}) * {literal(factor)}"
