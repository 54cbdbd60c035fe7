"""Give each fix of a finding its patch: the rule's rewrite placed on the user's line.

Runs after the diagnosis and before the trials, so that what is tried is the patch
the user will read: a fix whose rewrite cannot be placed (the file changed, the
line is not the user's, the patched file would not parse) keeps its code to read
but gets no patch, and so can never be marked verified.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

from gradient_doctor.core.evidence import StepHistory, TrainingSetup
from gradient_doctor.core.findings import Edit, Finding, Fix, KeywordEdit, Origin, SourceLine
from gradient_doctor.core.gradient_paths import PathBreak
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.rewrites import data as data_rewrite
from gradient_doctor.core.knowledge.rewrites import dtype_policy as policy_rewrite
from gradient_doctor.core.knowledge.rewrites import layer as layer_rewrite
from gradient_doctor.core.knowledge.rewrites import optimizer as optimizer_rewrite
from gradient_doctor.core.knowledge.rewrites import (
    own_update,
    score_function,
    torch_optimizer,
    variable_start,
)
from gradient_doctor.core.knowledge.rewrites import xla as xla_rewrite
from gradient_doctor.core.knowledge.rewrites.finite_rows import FitRows, drop_nonfinite_rows
from gradient_doctor.core.knowledge.rewrites.layer import LayerSite
from gradient_doctor.core.knowledge.rewrites.optimizer import OptimizerSite
from gradient_doctor.core.knowledge.source import syntax_edit
from gradient_doctor.core.knowledge.source.spelling import in_files_names
from gradient_doctor.core.knowledge.wording import format_number
from gradient_doctor.core.patches import (
    PatchError,
    patched_text,
    read_lines,
    replace_line,
    unified_diff,
)


@dataclass(frozen=True)
class FixSites:
    """Where in the user's code the fixes go that do not rewrite the origin's line.

    Attributes:
        optimizer: the optimizer and the line that built it (learning rate, clipping).
        weights_layer: the layer whose weights feed the origin op (bounded weights).
        trained_layers: every trained layer whose line is known (initialisation).
        fit: the user's `fit(...)` line, when it can standardise its input features.
        fit_targets: the same line, when it can standardise its regression targets.
        fit_without_targets: `fit` was given no targets (`fit(x)`): the model's own
            step may read its inputs as targets, so they are scaled, not standardised.
        fit_rows: the same line, when some rows of the NumPy arrays it was given hold
            NaN or Inf and hold every non-finite value the failing batch had.
        path_break: for missing gradients, where the path broke and the
            `tape.gradient(...)` call that returned None (a surrogate loss term).
        compiled: the line that compiled the step with XLA (`model.compile(...,
            jit_compile=True)`, `@tf.function(jit_compile=True)`), to turn it off.
        own_update: for a script that updates its tensors itself (no optimizer), the
            `backward()` line: its file holds the updates whose rate a fix lowers.
        dtype_policy: the line that set a half-precision dtype policy (`keras.config.
            set_dtype_policy("float16")`), which the mixed policy replaces.
        rate_set_by: what sets the learning rate at each epoch's start (a Keras
            `LearningRateScheduler` callback), named: the optimizer's own rate is
            overwritten there, so a lower rate is written for the schedule, unpatched.
    """

    optimizer: OptimizerSite | None = None
    weights_layer: LayerSite | None = None
    trained_layers: tuple[LayerSite, ...] = ()
    fit: SourceLine | None = None
    fit_targets: SourceLine | None = None
    fit_without_targets: bool = False
    fit_rows: FitRows | None = None
    path_break: PathBreak | None = None
    compiled: SourceLine | None = None
    own_update: SourceLine | None = None
    dtype_policy: SourceLine | None = None
    rate_set_by: str | None = None


def place_fixes(
    finding: Finding,
    root: str = ".",
    sites: FixSites | None = None,
    history: StepHistory | None = None,
    user_file: Callable[[str], bool] | None = None,
) -> Finding:
    """The finding with `edits` and `patch` set on each fix that can be written as a patch.

    Args:
        finding: a diagnosed finding; fixes with a `rewrite` are placed on
            `finding.origin.source`.
        root: the directory the script was run from (paths are relative to it).
        sites: where the other fixes go (the optimizer's line, the layers' lines);
            None when unknown.
        history: the recent steps (the clipping threshold is their median norm).
        user_file: says whether a file is the user's (the adapter's source-frame
            filter); a fix that would patch any other file keeps no patch, as one
            of a file outside `root` does. None takes every file as the user's.
    """
    sites = sites or FixSites()

    def mine(file: str) -> bool:
        return _inside_root(file) and (user_file is None or user_file(os.path.join(root, file)))

    def users(fix: Fix | None) -> Fix | None:
        if fix is None:
            return None
        return fix if all(mine(edit.file) for edit in fix.edits) else None

    source = finding.origin.source if finding.origin is not None else None
    origin_lines = read_lines(os.path.join(root, source.file)) if source is not None else None
    fixes = []
    for fix in finding.fixes:
        if fix.family == "better_init" and _initialised_well(sites):
            continue  # every layer is drawn as the fix would draw it: nothing to propose
        placed = None
        if fix.rewrite and origin_lines is not None:
            fix = _in_files_names(fix, origin_lines)
            edit = replace_line(source, fix.rewrite, origin_lines)
            others = _other_lines(fix.edits, root, mine)
            placed = with_edits(fix, (edit, *others), root) if edit is not None else None
            fix = dataclasses.replace(fix, edits=())
        elif fix.keyword_edits:
            placed = _keyword_fix(fix, root, mine)
        elif fix.edits:  # edits of lines other than the origin's (the line making its input)
            placed = with_edits(fix, tuple(_other_lines(fix.edits, root, mine)), root)
            placed = placed if placed.patch is not None else None
        elif fix.family == "lower_learning_rate" and sites.rate_set_by is not None:
            placed = _scheduled_rate_fix(fix, sites.rate_set_by)
        elif fix.family == "reset_gradients" and sites.optimizer is not None:
            placed = _reset_fix(fix, sites.optimizer, root)
        elif fix.family in _OPTIMIZER_FIXES and sites.optimizer is not None:
            placed = _optimizer_fix(fix, sites.optimizer, root, history)
        elif fix.family in _LAYER_FIXES:
            placed = _layer_fix(fix, sites, root)
        elif fix.family == "normalize_input" and sites.fit is not None:
            part = "x_scaled" if sites.fit_without_targets else "x"
            placed = _data_fix(fix, sites.fit, root, part)
        elif fix.family == "normalize_target" and sites.fit_targets is not None:
            placed = _data_fix(fix, sites.fit_targets, root, part="y")
        elif fix.family == "clean_input" and sites.fit_rows is not None:
            placed = _rows_fix(fix, sites.fit_rows, root)
        elif fix.family == "reinforce" and sites.path_break is not None:
            placed = _surrogate_fix(fix, sites.path_break, root)
        elif fix.family == "disable_xla" and sites.compiled is not None:
            placed = _xla_fix(fix, sites.compiled, root)
        elif fix.family == "lower_learning_rate" and sites.own_update is not None:
            placed = _own_update_fix(fix, sites.own_update, root)
        elif fix.family == "mixed_precision" and sites.dtype_policy is not None:
            placed = _policy_fix(fix, sites.dtype_policy, root)
        elif fix.variable_start is not None and finding.origin is not None:
            placed = _start_fix(fix, finding.origin, root, mine)
        fixes.append(users(placed) or fix)
    optimizer = sites.optimizer
    not_fixes = tuple(
        dataclasses.replace(
            item,
            fix=users(_optimizer_fix(_as_fix(item.remedy, optimizer), optimizer, root, history)),
        )
        if item.remedy in _TRIED_NOT_FIXES and optimizer is not None and item.fix is None
        else item
        for item in finding.not_fixes
    )
    return dataclasses.replace(finding, fixes=tuple(fixes), not_fixes=not_fixes)


# A lower rate for a schedule a callback applies: its function's values, scaled down.
_SCHEDULED_RATE = (
    "keras.callbacks.LearningRateScheduler(lambda epoch, lr: schedule(epoch, lr) / 10)\n"
    "# your schedule's rates, 10x lower: the rate the optimizer is built with is replaced\n"
    "# at the start of each epoch, so lowering it there changes nothing after the first"
)


def _scheduled_rate_fix(fix: Fix, setter: str) -> Fix:
    """A lower learning rate where `setter` sets the rate at each epoch's start: said for
    the schedule, with no patch of the optimizer's line (which the setter overwrites)."""
    return dataclasses.replace(
        fix,
        title=f"Lower the learning rates that {setter} sets (the optimizer's own is "
        "overwritten at each epoch's start)",
        code=_SCHEDULED_RATE,
        edits=(),
        patch=None,
    )


def _start_fix(fix: Fix, origin: Origin, root: str, mine: Callable[[str], bool]) -> Fix | None:
    """`fix` as a patch of the statement that makes its variable, found by the variable's
    own name (its last part: `scale` of `flow.scale`) in the origin's file, or None when
    that file holds no single such statement that writes the value."""
    source, start = origin.source, fix.variable_start
    if source is None or not mine(source.file):
        return None
    lines = read_lines(os.path.join(root, source.file))
    tree, text = syntax_edit.parse(lines) if lines is not None else (None, [])
    name = start.name.replace("/", ".").rpartition(".")[2].split(":")[0]
    statement = variable_start.made_at(tree, name) if tree is not None else None
    if statement is None:
        return None
    edit = variable_start.started_at(text, statement, start.made_at, start.start, source.file)
    if edit is None:
        return None
    code = "\n".join(edit.new_lines).strip()
    placed = with_edits(dataclasses.replace(fix, code=code), (edit,), root)
    return placed if placed.patch is not None else None


def _keyword_fix(fix: Fix, root: str, mine: Callable[[str], bool]) -> Fix | None:
    """`fix` with its keyword changes made edits of the statements they name, or None
    when one cannot be made (the file not the user's, not exactly one call on those
    lines passing the argument one of the values it expects, or leaving it out where
    the change may add it)."""
    edits = []
    for change in fix.keyword_edits:
        source = change.source
        lines = read_lines(os.path.join(root, source.file)) if mine(source.file) else None
        tree, text = syntax_edit.parse(lines) if lines is not None else (None, [])
        if tree is None:
            return None
        edit = _keyword_edit(change, tree, text)
        if edit is None:
            return None
        edits.append(edit)
    placed = with_edits(dataclasses.replace(fix, keyword_edits=()), tuple(edits), root)
    return placed if placed.patch is not None else None


def _keyword_edit(change: KeywordEdit, tree: ast.Module, text: list[str]) -> Edit | None:
    """The edit making `change` in the one call it can apply to on its lines, or None."""
    source = change.source
    new = change.new
    if change.keras_path:
        new = syntax_edit.keras_spelling(tree, new)
        if new is None:
            return None
    calls = [
        call
        for call in syntax_edit.calls_on(tree, source)
        if change.callee is None or syntax_edit.callee(call.func) == change.callee
    ]
    if change.callee is not None and source.span is not None and len(calls) > 1:
        indent = len(text[source.line - 1]) - len(text[source.line - 1].lstrip())
        calls = [c for c in calls if c.col_offset - indent == source.span[0]] or calls
    matches = []
    for call in calls:
        value = syntax_edit.argument(call, change.position, change.keyword)
        if value is None and change.add:
            matches.append((call, None))
        elif isinstance(value, ast.Constant) and _holds(value.value, change.values):
            matches.append((call, value))
        elif change.references and syntax_edit.callee(value) in change.values:
            matches.append((call, value))  # a function passed by its name
    if len(matches) != 1:
        return None
    call, value = matches[0]
    if value is None:
        return syntax_edit.add_keyword(text, call, f"{change.keyword}={new}", source.file)
    return syntax_edit.replace_node(text, value, new, source.file)


def _holds(value: object, values: tuple[object, ...]) -> bool:
    """`value` is one of `values`, of the same type (a `False` is not a 0)."""
    return any(type(value) is type(item) and value == item for item in values)


def _in_files_names(fix: Fix, lines: list[str]) -> Fix:
    """`fix` with its rewrite and code spelled in the names the user's file imports
    (`spelling.in_files_names`)."""
    rewrite = in_files_names(fix.rewrite, lines)
    if rewrite == tuple(fix.rewrite):
        return fix
    code = "\n".join(in_files_names(fix.code.split("\n"), lines))
    return dataclasses.replace(fix, rewrite=rewrite, code=code)


def _other_lines(edits: tuple[Edit, ...], root: str, mine: Callable[[str], bool]) -> list[Edit]:
    """A rewrite fix's edits of lines other than the origin's (the rule writes them
    stripped, before placement: the same op's other risky calls), each placed on its
    line as `rewrite` is; one in a file not the user's, or whose line changed, is left
    out, and the origin's rewrite keeps its patch."""
    placed = []
    for edit in edits:
        lines = read_lines(os.path.join(root, edit.file)) if mine(edit.file) else None
        if lines is None or not edit.old_lines:
            continue
        at = SourceLine(edit.file, edit.line, edit.old_lines[0])
        made = replace_line(at, in_files_names(edit.new_lines, lines), lines)
        if made is not None:
            placed.append(made)
    return placed


_ORTHOGONAL_TITLE = (
    "Draw the recurrent kernel orthogonal (gain 1, Keras's default), so the state keeps its "
    "scale from one time step to the next"
)
# Fix families that change the lines building the user's layers, and what the trial sets.
_LAYER_FIXES = {
    "constrain_weights": ("kernel_constraint", layer_rewrite.MAX_NORM),
    "better_init": ("kernel_initializer", "he_normal"),
}


def _inside_root(file: str) -> bool:
    """Whether a patched file lies inside the folder run from: a patch's paths are
    relative to it (`patch -p1` and `git apply` refuse absolute paths and `..`)."""
    return not os.path.isabs(file) and file.split(os.sep)[0] != os.pardir


# The title of a `fit` line's patch standardising each part of its data.
_DATA_TITLES = {
    "x": "Standardise the input features with the training data's mean and std "
    "(do the same wherever you feed the model new data)",
    "x_scaled": "Scale the input features by their largest magnitude, into [0, 1] (or "
    "[-1, 1]): fit is given no targets, so your step may read the inputs as targets, "
    "which standardising would take out of [0, 1] (scale new data the same way)",
    "y": "Standardise the regression targets with the training targets' mean and std "
    "(the model then predicts standardised values: multiply its predictions by that std "
    "and add that mean)",
}


def _data_fix(fix: Fix, fit: SourceLine, root: str, part: str = "x") -> Fix | None:
    """`fix` written as the `fit` line standardising its input (`part` "x") or its
    targets ("y"), or scaling its input by its largest magnitude ("x_scaled"), or None."""
    lines = read_lines(os.path.join(root, fit.file))
    if lines is None:
        return None
    if part == "x_scaled":
        edit, setting = data_rewrite.scale_fit_input(fit, lines), ("scale_x", 0)
    else:
        edit = data_rewrite.standardise_fit_input(fit, lines, part)
        setting = (f"standardise_{part}", data_rewrite.EPSILON)
    if edit is None:
        return None
    return _patched(dataclasses.replace(fix, title=_DATA_TITLES[part]), (edit,), root, setting)


def _rows_fix(fix: Fix, site: FitRows, root: str) -> Fix | None:
    """`fix` written as the `fit` line leaving out the rows of its data that hold NaN or
    Inf, or None."""
    lines = read_lines(os.path.join(root, site.source.file))
    edit = drop_nonfinite_rows(site, lines) if lines is not None else None
    if edit is None:
        return None
    holding = " or ".join(f"`{part}`" for part in site.holding)
    title = (
        f"Leave out the {site.dropped} of {site.total} examples that hold NaN or Inf in "
        f"{holding} (or impute them where your data is loaded)"
    )
    return _patched(dataclasses.replace(fix, title=title), (edit,), root, ("finite_rows", 0))


def _xla_fix(fix: Fix, compiled: SourceLine, root: str) -> Fix | None:
    """`fix` written as the line that compiled the step passing `jit_compile=False`."""
    lines = read_lines(os.path.join(root, compiled.file))
    edit = xla_rewrite.compile_without_xla(compiled, lines) if lines is not None else None
    if edit is None:
        return None
    return _patched(fix, (edit,), root, ("jit_compile", False))


def _policy_fix(fix: Fix, site: SourceLine, root: str) -> Fix | None:
    """`fix` written as the line that set the half-precision policy setting the mixed one;
    its trial setting names that policy (only a run from the start builds a model under
    it)."""
    lines = read_lines(os.path.join(root, site.file))
    made = policy_rewrite.mixed_policy(site, lines) if lines is not None else None
    if made is None:
        return None
    edit, mixed = made
    return _patched(fix, (edit,), root, ("dtype_policy", mixed))


def _own_update_fix(
    fix: Fix, backward: SourceLine, root: str, rungs: tuple[float, ...] | None = None
) -> Fix | None:
    """`fix` written as the script's own updates at `rungs[0]` of their rate (a tenth),
    in the file of its `backward()` call (`own_update`), with the next rungs as its
    `stronger` fix (a tutorial's rate a tenth lower still diverged; a hundredth trained);
    None when it cannot be written."""
    rungs = LEARNING_RATE_RUNGS if rungs is None else rungs
    lines = read_lines(os.path.join(root, backward.file))
    if not rungs or lines is None:
        return None
    factor = rungs[0]
    made = own_update.lower_own_rate(lines, backward.file, factor)
    if made is None:
        return None
    edits, was = made
    title = (
        f"Lower the learning rate of your own update {round(1 / factor)}x, from "
        f"{format_number(was)} to {format_number(was * factor)}"
    )
    placed = _patched(dataclasses.replace(fix, title=title), edits, root, None)
    if placed is None or len(rungs) < 2:
        return placed
    return dataclasses.replace(placed, stronger=_own_update_fix(fix, backward, root, rungs[1:]))


def _surrogate_fix(fix: Fix, path_break: PathBreak, root: str) -> Fix | None:
    """`fix` written as a score-function surrogate added to the tape's loss, or None."""
    node, call = path_break.node, path_break.gradient_call
    if node is None or node.source is None or call is None:
        return None
    lines = read_lines(os.path.join(root, call.file))
    if lines is None:
        return None
    shape = node.output_shapes[0] if node.output_shapes else None
    rank = len(shape) if shape is not None else None
    made = score_function.score_function_surrogate(node.op_type, node.source, call, lines, rank)
    if made is None:
        return None
    placed = with_edits(score_function.as_fix(fix, made), (made.edit,), root)
    return placed if placed.patch is not None else None


def _layer_fix(fix: Fix, sites: FixSites, root: str) -> Fix | None:
    """`fix` written as edits of the lines that built the layers it changes, or None.

    A better initialisation of a model with a recurrent cell whose recurrent kernel
    grows the state (`wants_orthogonal_recurrence`) redraws that kernel orthogonal:
    He's initialisation of the input kernels would leave the growth through time as it
    was."""
    setting = _LAYER_FIXES[fix.family]
    recurrent = [s for s in sites.trained_layers if layer_rewrite.wants_orthogonal_recurrence(s)]
    if fix.family == "constrain_weights":
        targets = (sites.weights_layer,) if sites.weights_layer is not None else ()
        make = layer_rewrite.constrain_kernel
    elif recurrent:
        targets, make = recurrent, layer_rewrite.orthogonal_recurrence
        setting = ("recurrent_initializer", "orthogonal")
        fix = dataclasses.replace(fix, title=_ORTHOGONAL_TITLE)
    else:
        targets = tuple(s for s in sites.trained_layers if layer_rewrite.wants_he_init(s))
        make = layer_rewrite.he_initialised
        below = [s.bias_constant for s in targets if layer_rewrite.starts_below_threshold(s)]
        if below:
            zeroed = ", and start the biases at 0"
            base = fix.title.removesuffix(zeroed)  # the rule may have said so already
            fix = dataclasses.replace(
                fix,
                title=f"{base}{zeroed}: a constant bias of {format_number(min(below))} puts "
                "every unit below its threshold from the first step",
            )
    edits: dict[tuple[str, int], Edit] = {}
    for site in targets:
        key = (site.source.file, site.source.line)
        lines = read_lines(os.path.join(root, site.source.file))
        edit = make(site, lines) if lines is not None and key not in edits else None
        if edit is not None:
            edits[key] = edit
    if not edits:
        return None
    return _patched(fix, tuple(edits.values()), root, setting)


def _initialised_well(sites: FixSites) -> bool:
    """Every trained layer whose line is known is already initialised for its activation
    (He's for ReLUs, Glorot's otherwise), with no recurrent kernel that grows the state."""
    layers = sites.trained_layers
    return bool(layers) and all(
        layer_rewrite.initialised_for_its_activation(site)
        and not layer_rewrite.wants_orthogonal_recurrence(site)
        for site in layers
    )


def _as_fix(remedy: str, site: OptimizerSite) -> Fix:
    """The fix a not-fix remedy would be, so that a trial can run its patch."""
    setup = TrainingSetup(
        learning_rate=site.learning_rate, framework=site.framework, optimizer=site.class_name
    )
    if remedy == "lower_learning_rate":
        return remedies.lower_learning_rate(setup)
    if remedy == "clip_by_value":
        return Fix("clip_by_value", "Clip each gradient value (clipvalue)", "")
    return remedies.gradient_clipping(setup)


# Fix families that change the optimizer's line, and the keyword each one sets.
_OPTIMIZER_FIXES = {
    "lower_learning_rate": None,
    "gradient_clipping": "global_clipnorm",
    "clip_by_value": "clipvalue",
    "loss_scaling": None,
}
# Not-fixes written as their patch too, so that a trial can show whether they help.
_TRIED_NOT_FIXES = frozenset({"lower_learning_rate", "gradient_clipping", "clip_by_value"})
# Each gradient value is clipped to this (finite whatever the global norm does).
CLIP_VALUE = 1.0
# The learning rates a lower-learning-rate fix is tried at, over the user's: a tenth
# first, a hundredth when that trial fails.
LEARNING_RATE_RUNGS = (0.1, 0.01)


# Fewer healthy gradient norms than this give no median to clip at: the run's first
# steps may be the explosion itself (a recurrent net's first update, norm 478224).
# No training runs healthy at a gradient norm past this: a median beyond it is of norms
# that were the trouble already.
MAX_HEALTHY_NORM = 1e6
MIN_NORMS_FOR_MEDIAN = 5


def clipping_threshold(history: StepHistory | None) -> float:
    """The norm to clip at: the median healthy gradient norm (any larger and clipping does
    nothing on a typical step); 1.0 (the frameworks' usual example) when fewer than
    `MIN_NORMS_FOR_MEDIAN` were recorded, or when their median is past
    `MAX_HEALTHY_NORM` (a run whose norms were astronomical from its first step, 1e35
    under a log-variance that overflows, has no healthy norm to clip at).

    The median of the steps recorded, not of the earliest ones: story 3's warm-up run,
    clipped at the median of its first tenth (2.5), diverged where the median of all held.
    """
    norms = sorted(
        n for n in (history.grad_norms if history else ()) if n is not None and 0 < n < math.inf
    )
    if len(norms) < MIN_NORMS_FOR_MEDIAN or norms[len(norms) // 2] > MAX_HEALTHY_NORM:
        return 1.0
    return float(norms[len(norms) // 2])


def _optimizer_fix(
    fix: Fix,
    site: OptimizerSite,
    root: str,
    history: StepHistory | None,
    rungs: tuple[float, ...] = LEARNING_RATE_RUNGS,
) -> Fix | None:
    """`fix` written as an edit of the optimizer's line, or None when it cannot be.

    A lower learning rate is written at the first of `rungs` (the new rate over the
    user's), with the next rungs as its `stronger` fix: a rate a tenth of one that
    made Adam's steps of 20 throw a layer out is still 2. In PyTorch
    (`torch_optimizer`) the rate is the constructor's `lr` (titled by it: a scheduler
    scales the rate from there), and clipping is a line inserted before the user's
    `optimizer.step()`; loss scaling, a `GradScaler` woven through the loop, is not
    written.
    """
    lines = read_lines(os.path.join(root, site.source.file))
    torch = site.framework == "torch"
    if lines is None:
        return None
    if fix.family == "loss_scaling":  # no setting: only a rerun from the start can try it
        edit = None if torch else optimizer_rewrite.wrap_loss_scaling(site, lines)
        return _patched(fix, (edit,), root, None) if edit is not None else None
    if fix.family == "lower_learning_rate":
        if not rungs:
            return None
        rewrite = torch_optimizer if torch else optimizer_rewrite
        made = rewrite.lower_learning_rate(site, lines, rungs[0])
        if made is None:
            return None
        titled = (
            _lowered_by(fix, site, rungs[0]) if torch else _moved_since(fix, site, lines, rungs[0])
        )
        placed = _patched(titled, made[0], root, (made[1].name, made[1].value))
        if placed is None or len(rungs) < 2:
            return placed
        further = _optimizer_fix(_lowered_by(fix, site, rungs[1]), site, root, history, rungs[1:])
        return dataclasses.replace(placed, stronger=further)
    keyword = _OPTIMIZER_FIXES[fix.family]
    value = CLIP_VALUE if keyword == "clipvalue" else clipping_threshold(history)
    if torch:
        step = site.step_line
        step_lines = read_lines(os.path.join(root, step.file)) if step is not None else None
        made = (
            torch_optimizer.clip_before_step(site, lines, step_lines, keyword, value)
            if step_lines is not None
            else None
        )
    else:
        made = optimizer_rewrite.set_clipping(site, lines, keyword, value)
    if made is None:
        return None
    edits, setting = made
    return _patched(fix, edits, root, (setting.name, setting.value))


def _moved_since(fix: Fix, site: OptimizerSite, lines: list[str], factor: float) -> Fix:
    """`fix` titled for the rate the optimizer's line writes, when a schedule or a
    callback moved the rate in use away from it: the patch divides the written one."""
    built = optimizer_rewrite.built_learning_rate(site, lines)
    now = site.learning_rate
    if built is None or now is None or math.isclose(built, now, rel_tol=0.01):
        return fix
    title = (
        f"Lower the learning rate {round(1 / factor)}x where the optimizer is built, from "
        f"{format_number(built)} to {format_number(built * factor)} (a schedule or callback "
        f"had moved it to {format_number(now)} by the failing step)"
    )
    return dataclasses.replace(fix, title=title)


def _lowered_by(fix: Fix, site: OptimizerSite, factor: float) -> Fix:
    """`fix` titled for a learning rate `factor` times the user's: the param groups'
    own rates where they were built with them (not the constructor's default, which
    no group then uses), the one rate in use under a scheduler that sets it."""
    times = round(1 / factor)
    rates = [rate for rate in site.group_rates if rate is not None]
    sets_rates = any(s.kind in torch_optimizer.RATE_SETTING_SCHEDULERS for s in site.schedulers)
    written = list(dict.fromkeys(rates)) if len(rates) == len(site.group_rates) else []
    if len(written) > 1 and not sets_rates:
        title = (
            f"Lower each param group's learning rate {times}x, from "
            f"{' and '.join(map(format_number, written))} to "
            f"{' and '.join(format_number(rate * factor) for rate in written)}"
        )
        return dataclasses.replace(fix, title=title)
    setting = next(
        (s for s in site.schedulers if s.kind in torch_optimizer.RATE_SETTING_SCHEDULERS), None
    )
    if setting is not None:  # the patch scales the scheduler's own rates, not `lr`
        rates = " and ".join(
            f"`{keyword}`" for _, keyword in torch_optimizer.RATE_ARGUMENTS[setting.kind]
        )
        title = f"Lower the learning rate {times}x where {setting.class_name} sets it ({rates})"
        if site.learning_rate is not None:
            title += f"; it was {format_number(site.learning_rate)} at the failing step"
        return dataclasses.replace(fix, title=title)
    was = written[0] if written else site.learning_rate
    title = f"Lower the learning rate {times}x"
    if was is not None:
        title += f", from {format_number(was)} to {format_number(was * factor)}"
    return dataclasses.replace(fix, title=title)


def _reset_fix(fix: Fix, site: OptimizerSite, root: str) -> Fix | None:
    """`fix` as a `zero_grad()` line inserted after the optimizer's `step()`, or None."""
    step = site.step_line
    lines = read_lines(os.path.join(root, step.file)) if step is not None else None
    edit = torch_optimizer.zero_grad_after_step(site, lines) if lines is not None else None
    return _patched(fix, (edit,), root, None) if edit is not None else None


def _patched(fix: Fix, edits: tuple[Edit, ...], root: str, setting: tuple) -> Fix | None:
    """`fix` with `edits` as its patch, the edited lines as its code to read, and the
    setting its trial applies; None when the edits do not make a patch."""
    placed = with_edits(fix, edits, root)
    if placed.patch is None:
        return None
    code = "\n".join(line for edit in edits for line in _dedented(edit.new_lines))
    return dataclasses.replace(placed, code=code, trial_setting=setting)


def _dedented(lines: tuple[str, ...]) -> list[str]:
    """`lines` without the indentation they share."""
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return [line[indent:] for line in lines]


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
