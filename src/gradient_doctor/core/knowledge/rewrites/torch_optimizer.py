"""Rewrite a PyTorch optimizer fix in the user's file: the constructor's `lr`, a clip before step().

A lower learning rate scales the `lr` the user passed (keyword `lr`, or the second
positional argument after the parameters) where the optimizer is built:
`lr=PEAK_LR` becomes `lr=PEAK_LR * 0.1`, a literal is divided, a missing `lr` is
written as the class's own default divided. Most schedulers (`LambdaLR`, `StepLR`,
`LinearLR`, ...) multiply the rate it was built with, so every rate the run uses is
scaled alike (a cosine's absolute floor `eta_min`, a plateau's `min_lr`, is scaled on
its own line with it); the trial's setting says so ("learning_rate_scale"). `OneCycleLR` and
`CyclicLR` set the rates themselves, overwriting the optimizer's `lr` every step:
their rate arguments are scaled where they are built instead, and the optimizer's
line is left alone (both edited, the run would not be scaled twice, but the
optimizer's edit would change nothing). PyTorch has no clipping keyword
on the optimizer: clipping is a line the user writes just before `optimizer.step()`,
`torch.nn.utils.clip_grad_norm_(<the constructor's first argument>, max_norm=...)`,
spelled with the names the file imports.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Sequence

from gradient_doctor.core.findings import Edit, SourceLine
from gradient_doctor.core.knowledge.rewrites.optimizer import (
    OptimizerSite,
    SchedulerSite,
    Setting,
    optimizer_call,
    scaled,
)
from gradient_doctor.core.knowledge.source.syntax_edit import (
    argument,
    callee,
    calls_on,
    combined,
    literal,
    number,
    parse,
    rounded,
    segment,
)

# The core's clipping keywords -> the torch function, its bound's keyword, the setting.
_CLIPPING = {
    "global_clipnorm": ("clip_grad_norm_", "max_norm", "clip_grad_norm"),
    "clipvalue": ("clip_grad_value_", "clip_value", "clip_grad_value"),
}
# Calls by which a user already clips the gradients.
_CLIPPING_CALLS = frozenset(
    {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grads_with_norm_"}
)
# `torch.optim.lr_scheduler` classes that set the rate to absolute values of their
# own every step (OneCycleLR starts at max_lr / div_factor whatever the optimizer's
# `lr`): their arguments that are rates, as (position, the optimizer at 0; keyword).
_RATE_SETTING = {
    "OneCycleLR": ((1, "max_lr"),),
    "CyclicLR": ((1, "base_lr"), (2, "max_lr")),
}
# Schedulers that multiply the optimizer's `lr` towards an absolute floor of their own:
# the floor is scaled with the `lr` when written and not 0.
# (A rate patched below ReduceLROnPlateau's `min_lr` would never be reduced again: a
# plateau sets max(lr * factor, min_lr) only when that is lower than the rate.)
_RATE_FLOORS = {
    "CosineAnnealingLR": ((2, "eta_min"),),
    "CosineAnnealingWarmRestarts": ((3, "eta_min"),),
    "ReduceLROnPlateau": ((7, "min_lr"),),
}
# The scheduler kinds under which the optimizer's `lr` is not the rate in use.
RATE_SETTING_SCHEDULERS = frozenset(_RATE_SETTING)
# Each of those schedulers' rate arguments, as (position, keyword).
RATE_ARGUMENTS = _RATE_SETTING
_BUILTINS = frozenset(dir(builtins))
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def lower_learning_rate(
    site: OptimizerSite, lines: Sequence[str], factor: float = 0.1
) -> tuple[tuple[Edit, ...], Setting] | None:
    """The edits scaling the rates the run uses, and the trial's setting.

    The optimizer's `lr` where it is built (and a cosine scheduler's `eta_min`), or,
    under a scheduler that sets the rates itself, that scheduler's rate arguments.

    Args:
        site: the optimizer (`learning_rate` is its `lr` as constructed), with its
            schedulers.
        lines: the lines of the file that built it.
        factor: the new rate over the old.

    Returns:
        None when the line holds no call of the optimizer's class, the call unpacks
        `*args` or `**kwargs` (where `lr` is cannot be seen), or a literal or missing
        `lr` is not a positive number; under a scheduler that sets the rates, when
        its call is not found in that file or its rates cannot be seen there.
    """
    tree, text = parse(lines)
    if tree is None:
        return None
    if any(scheduler.kind in _RATE_SETTING for scheduler in site.schedulers):
        edits = _scheduler_edits(site, tree, text, _RATE_SETTING, factor)
        return (edits, Setting("learning_rate_scale", factor)) if edits else None
    call, _ = optimizer_call(tree, site)
    if call is None or _unpacks(call):
        return None
    groups = _group_rates(call)
    if groups is None and site.param_groups > 1:
        return None  # groups built elsewhere may set their own rates, unseen here
    rate = argument(call, 1, "lr")
    scaled_groups = [(node, scaled(text, node, factor)) for node in groups or ()]
    if rate is None and groups and len(groups) == _group_count(call):
        changes, scale = scaled_groups, factor  # no group uses the constructor's default
    elif rate is None or number(rate) is not None:
        was = site.learning_rate if rate is None else number(rate)
        if was is None or was <= 0:
            return None
        value = rounded(was * factor)
        change = ("add", f"lr={literal(value)}") if rate is None else (rate, literal(value))
        changes, scale = [change, *scaled_groups], value / was
    else:
        changes, scale = [(rate, scaled(text, rate, factor)), *scaled_groups], factor
    edit = combined(text, call, changes, site.source.file)
    floors = _scheduler_edits(site, tree, text, _RATE_FLOORS, factor)
    if floors is None or not _disjoint((edit, *floors)):
        floors = ()  # a floor unseen here: the rate above it is still scaled
    return (edit, *floors), Setting("learning_rate_scale", scale)


def _scheduler_edits(
    site: OptimizerSite,
    tree: ast.Module,
    text: list[str],
    table: dict[str, tuple[tuple[int, str], ...]],
    factor: float,
) -> tuple[Edit, ...] | None:
    """The edits scaling the rate arguments (`table`) of the optimizer's schedulers
    of a kind in `table`: one per call, a rate not given or a literal 0 left as it is.
    None when such a scheduler was built in another file, by a call not found or that
    unpacks arguments, or by a subclass (its arguments may differ), or when two edits
    would overlap."""
    edits = []
    for scheduler in site.schedulers:
        if scheduler.kind not in table:
            continue
        call = _scheduler_call(tree, text, scheduler)
        if (
            scheduler.source.file != site.source.file
            or scheduler.class_name != scheduler.kind
            or call is None
            or _unpacks(call)
        ):
            return None
        changes = []
        for position, keyword in table[scheduler.kind]:
            node = argument(call, position, keyword)
            if node is not None and number(node) != 0:
                changes.append((node, scaled(text, node, factor)))
        if changes:
            edits.append(combined(text, call, changes, site.source.file))
    return tuple(edits) if _disjoint(edits) else None


def _scheduler_call(tree: ast.Module, text: list[str], scheduler: SchedulerSite) -> ast.Call | None:
    """The call of the scheduler's class on its lines; the one at the recorded columns
    when there are several."""
    calls = [c for c in calls_on(tree, scheduler.source) if callee(c.func) == scheduler.class_name]
    return _the_call(calls, scheduler.source, text)


def _the_call(calls: list[ast.Call], source: SourceLine, text: list[str]) -> ast.Call | None:
    """The one call of `calls` (found on `source`'s lines), picked by the columns
    `source` records when there are several; None when it is not one."""
    if source.span is not None and len(calls) > 1 and 0 < source.line <= len(text):
        line = text[source.line - 1]
        indent = len(line.encode("utf-8")) - len(line.lstrip().encode("utf-8"))
        calls = [c for c in calls if c.col_offset - indent == source.span[0]]
    return calls[0] if len(calls) == 1 else None


def _disjoint(edits: Sequence[Edit]) -> bool:
    """Whether no two of `edits` change the same line."""
    spans = sorted((edit.line, edit.end_line) for edit in edits)
    return all(end < start for (_, end), (start, _) in zip(spans, spans[1:]))


def _group_count(call: ast.Call) -> int:
    """How many param groups the call's first argument writes out as dicts."""
    first = argument(call, 0, "params")
    return len(first.elts) if isinstance(first, ast.List | ast.Tuple) else 0


def _group_rates(call: ast.Call) -> list[ast.expr] | None:
    """The `"lr"` values of the param groups written as dicts in the call's first
    argument ([] when none sets one); None when the groups are not written there."""
    first = argument(call, 0, "params")
    if not isinstance(first, ast.List | ast.Tuple) or not all(
        isinstance(e, ast.Dict) for e in first.elts
    ):
        return None
    return [
        value
        for group in first.elts
        for key, value in zip(group.keys, group.values)
        if isinstance(key, ast.Constant) and key.value == "lr"
    ]


def clip_before_step(
    site: OptimizerSite,
    built_lines: Sequence[str],
    step_lines: Sequence[str],
    keyword: str,
    value: float,
) -> tuple[tuple[Edit, ...], Setting] | None:
    """The edit inserting a clipping line just before the user's `optimizer.step()`.

    The line clips what the optimizer's constructor was given, as the user wrote it
    (`model.parameters()`), when that can be written again at the step: a single
    group of tensors whose names the step's scope binds, not a one-shot iterator
    held in a name, at a line no other optimizer steps on. Otherwise it clips the
    optimizer's own parameters, through the object the step is called on
    (`optimizer.param_groups`).

    Args:
        site: the optimizer, with its `step_line`.
        built_lines: the lines of the file that built it.
        step_lines: the lines of the file that steps it.
        keyword: "global_clipnorm" (`clip_grad_norm_`) or "clipvalue" (`clip_grad_value_`).
        value: the bound, written with 4 significant digits (the setting holds it so).

    Returns:
        None when the step's line is unknown or is not a plain `X.step()` statement,
        the user already clips before it, or the file names no `torch` to spell it with.
    """
    step = site.step_line
    found = _step_statement(step, step_lines)
    if found is None or keyword not in _CLIPPING:
        return None
    function, bound, setting = _CLIPPING[keyword]
    tree, text, call, scope, indent = found
    if _clips_before(scope, step.line):
        return None
    spelled = torch_spelling(tree, f"nn.utils.{function}")
    if spelled is None:
        return None
    parameters = _parameters_as_written(site, built_lines, tree, scope)
    if parameters is None:
        receiver = segment(text, call.func.value)
        parameters = f'[p for group in {receiver}.param_groups for p in group["params"]]'
    written = literal(value)
    new = f"{indent}{spelled}({parameters}, {bound}={written})"
    return (Edit(step.file, step.line, step.line - 1, (new,), ()),), Setting(
        setting, float(written)
    )


def zero_grad_after_step(site: OptimizerSite, step_lines: Sequence[str]) -> Edit | None:
    """The edit inserting `X.zero_grad()` right after the user's `X.step()` statement,
    on the object the step is called on; None when the step's line is unknown or is not
    a plain `X.step()` statement."""
    step = site.step_line
    found = _step_statement(step, step_lines)
    if found is None:
        return None
    _, text, call, scope, indent = found
    statement = next(
        node
        for node in _own_nodes(scope)
        if isinstance(node, ast.stmt) and node.lineno == step.line
    )
    last = statement.end_lineno or step.line
    receiver = segment(text, call.func.value)
    return Edit(step.file, last + 1, last, (f"{indent}{receiver}.zero_grad()",), ())


def _step_statement(step: SourceLine | None, step_lines: Sequence[str]):
    """(tree, text, the `X.step()` call, its scope, its line's indentation) when `step`
    is a plain `X.step()` statement of the file; else None."""
    if step is None:
        return None
    tree, text = parse(step_lines)
    if tree is None or not 0 < step.line <= len(text):
        return None
    call = _step_call(tree, step, text)
    scope = _scope_of(tree, step.line)
    line = text[step.line - 1]
    if call is None or not _starts_statement(scope, step.line, line):
        return None
    return tree, text, call, scope, line[: len(line) - len(line.lstrip())]


def torch_spelling(tree: ast.Module, path: str) -> str | None:
    """How the file can name `torch.<path>`: through `torch` when it imports it, else
    through a submodule or name it imports from torch (`from torch import nn` gives
    `nn.utils.clip_grad_norm_`); None when it binds none."""
    target = f"torch.{path}"
    found = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is None and alias.name.split(".")[0] == "torch":
                    return target  # `import torch`, `import torch.nn`: binds `torch`
                if alias.asname is not None and _inside(target, alias.name):
                    found = found or alias.asname + target[len(alias.name) :]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _inside(target, full):
                    found = found or (alias.asname or alias.name) + target[len(full) :]
    return found


def _inside(target: str, module: str) -> bool:
    return target == module or target.startswith(module + ".")


def _unpacks(call: ast.Call) -> bool:
    """Whether `call` passes `*args` or `**kwargs`."""
    return any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    )


def _step_call(tree: ast.Module, step: SourceLine, text: list[str]) -> ast.Call | None:
    """The `X.step()` call (no arguments: a closure recomputes the loss inside it) on
    the step's line; the one at the recorded columns when there are several."""
    at_line = SourceLine(step.file, step.line, step.code)
    calls = [
        call
        for call in calls_on(tree, at_line)
        if isinstance(call.func, ast.Attribute)
        and call.func.attr == "step"
        and not call.args
        and not call.keywords
    ]
    return _the_call(calls, step, text)


def _scope_of(tree: ast.Module, line: int) -> ast.AST:
    """The innermost function whose body holds `line`, or the module."""
    scope: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.lineno < line <= (node.end_lineno or node.lineno):
                if scope is tree or node.lineno > scope.lineno:
                    scope = node
    return scope


def _own_nodes(scope: ast.AST):
    """The nodes of `scope`'s own code: not those of the functions and classes in it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def _starts_statement(scope: ast.AST, line: int, text: str) -> bool:
    """Whether a statement of `scope` starts `line`, at its indentation (a line inserted
    before it then runs right before it)."""
    indent = len(text.encode("utf-8")) - len(text.lstrip().encode("utf-8"))
    return any(
        isinstance(node, ast.stmt) and node.lineno == line and node.col_offset == indent
        for node in _own_nodes(scope)
    )


def _clips_before(scope: ast.AST, line: int) -> bool:
    """Whether `scope` calls a clipping function on a line before `line`."""
    return any(
        isinstance(node, ast.Call) and callee(node.func) in _CLIPPING_CALLS and node.lineno < line
        for node in _own_nodes(scope)
    )


def _parameters_as_written(
    site: OptimizerSite, built_lines: Sequence[str], step_tree: ast.Module, scope: ast.AST
) -> str | None:
    """The constructor's first argument as the user wrote it, when writing it again at
    the step clips exactly the optimizer's tensors; else None."""
    if site.param_groups != 1 or site.step_shared:
        return None
    tree, text = parse(built_lines)
    call = optimizer_call(tree, site)[0] if tree is not None else None
    first = argument(call, 0, "params") if call is not None else None
    if first is None or isinstance(first, ast.Starred | ast.Dict | ast.DictComp):
        return None
    if isinstance(first, ast.List | ast.Tuple) and any(isinstance(e, ast.Dict) for e in first.elts):
        return None
    if site.params_iterator and not isinstance(first, ast.Call):
        return None  # a name holding a generator the constructor already drained
    free = _free_names(first)
    if not free <= _bound_names(step_tree, scope) | _BUILTINS:
        return None
    if not _same_meaning(free, tree, call, site):
        return None
    written = segment(text, first)
    return ast.unparse(first) if "\n" in written else written


def _same_meaning(names: set[str], tree: ast.Module, call: ast.Call, site: OptimizerSite) -> bool:
    """Whether `names`, read where the optimizer was built, name the same objects where
    it steps: the same function (or module) of the same file, or module-level names of
    that file bound in neither function. A `self` bound in both is another object in
    each: `self.parameters()` of a model's `configure_optimizers` is not the trainer's
    `self.parameters()` in its `fit`, which raises AttributeError. Two methods of one
    class share their first argument, the instance (`self.model` built in `__init__`,
    stepped in `train`)."""
    step = site.step_line
    if step is None or step.file != site.source.file:
        return False  # another file's names are another module's
    built_scope, step_scope = _scope_of(tree, call.lineno), _scope_of(tree, step.line)
    if built_scope is step_scope or (
        isinstance(built_scope, ast.Module) and isinstance(step_scope, ast.Module)
    ):
        return True
    local = _scope_locals(built_scope) | _scope_locals(step_scope)
    shared = _shared_instance(tree, built_scope, step_scope)
    local -= shared
    return not (names & local) and names <= _names_bound_in(tree) | _BUILTINS | shared


def _shared_instance(tree: ast.Module, first: ast.AST, second: ast.AST) -> set[str]:
    """The name of the instance two methods of one class both take first (`self`), when
    they are such methods and name it alike; else no name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and first in node.body and second in node.body:
            names = [
                scope.args.posonlyargs[0].arg
                if scope.args.posonlyargs
                else scope.args.args[0].arg
                if scope.args.args
                else None
                for scope in (first, second)
            ]
            if names[0] is not None and names[0] == names[1]:
                return {names[0]}
    return set()


def _scope_locals(scope: ast.AST) -> set[str]:
    """The names a function binds itself (its arguments and assignments); none for the
    module."""
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return set()
    arguments = scope.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return {a.arg for a in every} | _names_bound_in(scope)


def _free_names(node: ast.expr) -> set[str]:
    """The names `node` reads that it does not bind itself (a comprehension's targets)."""
    read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound = {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    return read - bound


def _bound_names(tree: ast.Module, scope: ast.AST) -> set[str]:
    """The names code in `scope` can read: its own (arguments, assignments, imports)
    and the module's."""
    names = _names_bound_in(tree)
    if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        arguments = scope.args
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
        names |= {a.arg for a in every} | _names_bound_in(scope)
    return names


def _names_bound_in(scope: ast.AST) -> set[str]:
    names = set()
    for node in _own_nodes(scope):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    return names
