"""Variables that get no gradient: where the path from the loss to them breaks, and why."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Edit, Fix, SourceLine
from gradient_doctor.core.gradient_paths import (
    FROZEN,
    LEFT_FRAMEWORK,
    NEVER_READ,
    NON_DIFFERENTIABLE,
    NOT_USED,
    NOT_WATCHED,
    OTHER_PARAMETERS,
    OUTSIDE_TAPE,
    UNLOCATED,
    ZERO_GRADIENT,
    PathBreak,
)
from gradient_doctor.core.knowledge.blockers import blocker_for
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.layer_groups import LayerGroup, describe_layers, group_by_layer
from gradient_doctor.core.knowledge.remedies import discrete as discrete_remedies
from gradient_doctor.core.knowledge.remedies import paths as path_remedies
from gradient_doctor.core.knowledge.remedies import torch_paths as torch_remedies
from gradient_doctor.core.knowledge.remedies.not_fixes import (
    missing_gradient_not_fixes,
    torch_missing_gradient_not_fixes,
)
from gradient_doctor.core.knowledge.source.calls import find_call
from gradient_doctor.core.knowledge.wording import at_step, count, line_ref, quoted_line

# What Keras does with the gradients: every one None, or only some.
_ALL_MISSING = (
    'With no gradient for any variable, Keras raises "No gradients provided for any variable" '
    "(unwatched, your script stops there with that error); the doctor skipped the update "
    "instead (and, where it ran the step once more to see where the path breaks, that "
    "run's update too)."
)
_SOME_MISSING = (
    'Keras only warns ("Gradients do not exist for variables ...") and trains the rest, '
    "so these variables silently never train."
)


_ZERO_SILENT = "Keras gives no warning: the gradients exist, they are only zero."
# The tape gave them None, and the user's code put zeros (or other tensors) in their place.
_FILLED_IN = (
    "The tape gave them None, and your code put tensors of its own in their place before "
    "the update (`g if g is not None else tf.zeros_like(v)`), so nothing warns: they "
    "silently never train."
)
_TORCH_ZERO_SILENT = "PyTorch gives no warning: the gradients exist, they are only zero."
# What PyTorch does with them: `optimizer.step()` skips each parameter whose `.grad` is None.
_TORCH_ALL_MISSING = (
    "PyTorch raises nothing: `optimizer.step()` skips every parameter whose `.grad` is None, "
    "so no parameter moves and the loss never improves."
)
_TORCH_SOME_MISSING = (
    "PyTorch gives no warning: `optimizer.step()` skips the parameters whose `.grad` is None "
    "and trains the rest, so these parameters silently never train."
)
# `.detach()` is PyTorch's stop_gradient; the blocker's own words name TensorFlow's.
_TORCH_DETACH_WHY = (
    "`.detach()` blocks the gradient on purpose, so every parameter before it gets None; "
    "that is often intended (a target network, a frozen encoder, the hard part of a "
    "straight-through estimator)."
)


@dataclass(frozen=True)
class Account:
    """What one kind of break says and proposes.

    Attributes:
        story: one or two sentences: where the path breaks and why.
        reason: a clause the not-fixes reuse, e.g. "ArgMax at train.py:141 has no gradient".
        fixes: the remedies, most specific first.
    """

    story: str
    reason: str
    fixes: tuple[Fix, ...]


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain why some variables get no gradient; decline when no path break was found."""
    path_break = evidence.path_break
    if path_break is None:
        return None
    torch = _in_torch(path_break)
    groups = group_by_layer(path_break.variables, "." if torch else "/")
    account = _ACCOUNTS[path_break.kind](path_break, groups)
    if path_break.kind == FROZEN:  # no path, no tape: nothing of the tape tricks applies
        return Diagnosis("disconnected_gradients", account.story, (), account.fixes)
    if path_break.kind == ZERO_GRADIENT:
        framework_says = _TORCH_ZERO_SILENT if torch else _ZERO_SILENT
    elif path_break.filled_in:
        framework_says = _FILLED_IN
    elif torch:
        framework_says = _TORCH_ALL_MISSING if evidence.all_disconnected else _TORCH_SOME_MISSING
    else:
        framework_says = _ALL_MISSING if evidence.all_disconnected else _SOME_MISSING
    sentences = (_who(len(path_break.variables), groups, evidence), account.story, framework_says)
    not_fixes = torch_missing_gradient_not_fixes if torch else missing_gradient_not_fixes
    ruled_out = not_fixes(account.reason)
    if path_break.kind == NOT_WATCHED:  # watching them is the fix, and fit's tape does
        ruled_out = tuple(n for n in ruled_out if n.remedy in _SAME_WATCHING)
    elif path_break.kind == OTHER_PARAMETERS and torch:  # no path to mend: none is on it
        ruled_out = tuple(n for n in ruled_out if n.remedy in _STILL_NOT_MOVING)
    return Diagnosis(
        category="disconnected_gradients",
        explanation=" ".join(sentences),
        not_fixes=ruled_out,
        fixes=_when_none_trains(account.fixes, evidence, path_break),
    )


def _when_none_trains(fixes: tuple[Fix, ...], evidence: Evidence, path_break: PathBreak):
    """`fixes` without "stop training them" when no variable handed to the optimizer gets
    a gradient: frozen, none would train at all. Then the loss must be computed from the
    model's outputs within the framework (a value that left it, `.numpy()` in a helper, a
    loss re-wrapped as a new tensor, leaves none): said when nothing else is proposed."""
    if not evidence.all_disconnected:
        return fixes
    kept = tuple(fix for fix in fixes if fix.family != "exclude_unused_variables")
    if kept or len(kept) == len(fixes):  # something else, or nothing, was proposed
        return kept
    if _in_torch(path_break):
        return (torch_remedies.stay_in_torch(None, None),)
    return (path_remedies.numpy_round_trip_fix(None, None),)


def _in_torch(path_break: PathBreak) -> bool:
    """Whether the break was found in a PyTorch step (its account is spelled in PyTorch)."""
    return path_break.framework == "torch"


def _who(number: int, groups: Sequence[LayerGroup], evidence: Evidence) -> str:
    """ "None of the 19 variables handed to the optimizer gets a gradient at step 0 (...)."."""
    layers = f" ({describe_layers(groups)})" if groups else ""
    step = at_step(evidence.step)
    if number == 0:
        return f"Variables handed to the optimizer get no gradient{step}."
    alone = evidence.path_breaks == 1
    if evidence.all_disconnected and alone and number == 1:
        return f"The only variable handed to the optimizer gets no gradient{step}{layers}."
    if evidence.all_disconnected and alone:
        return (
            f"None of the {number} variables handed to the optimizer gets a gradient{step}{layers}."
        )
    verb = "gets" if number == 1 else "get"
    said = f"{count(number, 'variable')} handed to the optimizer {verb} no gradient{step}{layers}"
    if evidence.all_disconnected:
        others = count(evidence.path_breaks - 1, "other place")
        return f"{said}; the rest are cut at {others}, reported apart: none of them trains."
    return f"{said}."


def _non_differentiable(path_break: PathBreak, groups: Sequence[LayerGroup]) -> Account:
    op, source = _op_and_source(path_break)
    blocker = blocker_for(op)
    code = source.code.strip() if source is not None else ""
    torch = _in_torch(path_break)
    calls = (
        torch_remedies.BLOCKER_CALLS.get(blocker.name, blocker.calls) if torch else blocker.calls
    )
    call = find_call(code, calls) if calls else None
    fixes = (torch_remedies.BLOCKER_FIXES[blocker.name] if torch else blocker.fixes)(code, call)
    if blocker.name == "index" and path_break.picks_rows is False:
        # The index is used as a number (a router's expert made a mask), not looked up
        # as tokens are: the fixes weight the options, with no embedding table.
        fixes = (torch_remedies.choice_fixes if torch else discrete_remedies.choice_fixes)(
            code, call
        )
    if blocker.often_intended:
        fixes += (
            _exclude(path_break)(
                groups,
                "If the block is intended, stop training these variables",
                "if the block is intended, do not hand these variables to the optimizer:",
            ),
        )
    why = _TORCH_DETACH_WHY if torch and blocker.name == "stop_gradient" else blocker.why
    fixes = tuple(_on_break_line(fix, source) for fix in fixes)
    return Account(
        story=f"Their path to the loss breaks at {op}{_on(source)}. {why.format(op=op)}",
        reason=f"{op}{_at(source)} has no gradient",
        fixes=fixes,
    )


def _outside_tape(path_break: PathBreak, groups: Sequence[LayerGroup]) -> Account:
    op, source = _op_and_source(path_break)
    if _in_torch(path_break):
        return Account(
            story=f"Their path to the loss runs through {op}{_on(source)}, which ran with "
            "gradients off (inside `with torch.no_grad():` or `torch.inference_mode()`): "
            "autograd recorded nothing that links the loss to them.",
            reason=f"{op}{_at(source)} ran with gradients off",
            fixes=(torch_remedies.enable_grad(source),),
        )
    return Account(
        story=f"Their path to the loss runs through {op}{_on(source)}, which ran while the "
        "tape was not recording: it was computed before or after the `with "
        "tf.GradientTape()` block, so the tape has no record linking the loss to them.",
        reason=f"{op}{_at(source)} ran while no tape was recording",
        fixes=(path_remedies.compute_inside_tape(source),),
    )


def _left_framework(path_break: PathBreak, groups: Sequence[LayerGroup]) -> Account:
    op, source = _op_and_source(path_break)
    if _in_torch(path_break):
        made = torch_remedies.reentry_call(path_break.reentry)
        back = path_break.reentry
        where = f"{_on(source)} and came back as a new tensor"
        if back is not None and (source is None or (back.file, back.line) != _place(source)):
            where += _on(back)
        numpy = source is not None and ".numpy()" in source.code
        left = (
            "for NumPy (`.numpy()`)"
            if numpy
            else f"as Python numbers ({op}: `.item()`, `.tolist()` or `.numpy()`)"
        )
        data = "NumPy data" if numpy else "Python data"
        return Account(
            story=f"The value left PyTorch {left}{where}; a tensor made from {data} by "
            f"`{made}(...)` has no autograd history, so to autograd the loss does not depend "
            "on them.",
            reason=f"the value that left PyTorch{_at(source)} came back as a tensor with no "
            "history",
            fixes=(torch_remedies.stay_in_torch(source, path_break.reentry),),
        )
    return Account(
        story=f"The value left TensorFlow (`.numpy()`/NumPy) after {op}{_on(source)} and came "
        f"back as a constant{_on(path_break.reentry)}; the tape cannot follow it through "
        "NumPy, so to the tape the loss does not depend on them.",
        reason=f"the value that left TensorFlow{_at(source)} came back as a constant the tape "
        "cannot trace",
        fixes=(path_remedies.numpy_round_trip_fix(source, path_break.reentry),),
    )


def _not_used(path_break: PathBreak, groups: Sequence[LayerGroup]) -> Account:
    story = "The loss does not depend on the output of their layer"
    if path_break.node is not None:
        op, source = _op_and_source(path_break)
        story += (
            f": the last op their values reach is {op}{_on(source)}, and nothing from there "
            "leads to the loss"
        )
    return Account(
        story=story + ".",
        reason="the loss does not depend on these variables",
        fixes=(
            _exclude(path_break)(
                groups,
                "Use the layer on the way to the loss, or stop training it",
                "if these layers should train, use their output on the way to the loss; otherwise:",
            ),
        ),
    )


def _never_read(path_break: PathBreak, groups: Sequence[LayerGroup]) -> Account:
    source = path_break.node.source if path_break.node is not None else None
    built = f" (on your line {quoted_line(source)})" if source is not None else ""
    return Account(
        story=f"The step never reads these variables: the forward pass does not use them "
        f"(their layer is built{built} but not called, or its `call` does not read them).",
        reason="the step never reads these variables",
        fixes=(
            _exclude(path_break)(
                groups,
                "Use these variables in the forward pass, or stop training them",
                "call their layer (or read them in its `call`) if they should train; otherwise:",
            ),
        ),
    )


def _frozen(path_break: PathBreak, groups: Sequence[LayerGroup]) -> Account:
    model = f"`{path_break.model}`" if path_break.model else "The model"
    trained = path_break.trained_at
    where = f" by your line {quoted_line(trained)}" if trained is not None else ""
    count_weights = count(len(path_break.variables), "weight")
    return Account(
        story=(
            f"Model {model} is trained{where}, but none of its {count_weights} is trainable "
            f"({describe_layers(groups)}), so its own training moves nothing. Keras 3 reads "
            "`trainable` when a model's train step is built, at its first `fit` or "
            "`train_on_batch`, not at `compile()`: a model frozen before then (a GAN's "
            "discriminator frozen for the combined model) stays frozen in its own step. "
            'Keras only warns ("The model does not have any trainable weights").'
        ),
        reason="the model's weights are all frozen",
        fixes=(path_remedies.unfreeze_model(trained),),
    )


def _not_watched(path_break: PathBreak, groups: Sequence[LayerGroup]) -> Account:
    call = path_break.gradient_call
    asked = f" (your line {quoted_line(call)})" if call is not None else ""
    return Account(
        story="The tape was made with `watch_accessed_variables=False`, so it records only "
        "what `tape.watch(...)` was given, and these variables were never given to it: it "
        f"recorded no op on them, and its gradient for them{asked} is None whatever the loss "
        "does with their values.",
        reason="the tape was not watching these variables",
        fixes=(path_remedies.watch_variables(groups),),
    )


def _zero_gradient(path_break: PathBreak, groups: Sequence[LayerGroup]) -> Account:
    if _in_torch(path_break):
        return Account(
            story="Their gradient exists but was exactly zero on every step of a long window: "
            "their values reach the loss only through ops whose derivative is zero there "
            "(torch.sign or torch.round, a ReLU that is off for every input, a tanh or "
            "sigmoid saturated at its bound: past about 9 in float32 its output is exactly 1, "
            "as inputs far from unit scale drive it, a clamp whose bound is always hit), or "
            "the gradients were scaled to zero before the update "
            "(clip_grad_norm_ over gradients whose squares overflow: their norm is inf, and "
            "max_norm / inf is 0), so the optimizer never moves them.",
            reason="the gradient through these ops is exactly zero",
            fixes=(
                Fix(
                    "straight_through",
                    "Give a piecewise-constant op the identity's gradient (straight-through)",
                    "y = x + (torch.sign(x) - x).detach()  # sign forward, identity backward",
                ),
                Fix(
                    "activation_change",
                    "Use an activation whose gradient is never exactly zero",
                    "torch.nn.LeakyReLU(0.01)  # in place of torch.nn.ReLU()",
                ),
                Fix(
                    "clip_by_value",
                    "Clip each gradient value, which needs no norm (clip_grad_value_)",
                    "torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=1.0)",
                ),
            ),
        )
    return Account(
        story="Their gradient exists but was exactly zero on every step of a long window: "
        "their values reach the loss only through ops whose derivative is zero there "
        "(tf.sign or a rounding trick, a ReLU that is off for every input, a tanh or "
        "sigmoid saturated at its bound: past about 9 in float32 its output is exactly 1, "
        "as inputs far from unit scale drive it, a clip whose bound is always hit), so the "
        "optimizer never moves them.",
        reason="the gradient through these ops is exactly zero",
        fixes=(
            Fix(
                "straight_through",
                "Give a piecewise-constant op the identity's gradient (straight-through)",
                "y = x + tf.stop_gradient(tf.sign(x) - x)  # sign forward, identity backward",
            ),
            Fix(
                "activation_change",
                "Use an activation whose gradient is never exactly zero",
                "keras.layers.Dense(units, activation=keras.activations.leaky_relu)",
            ),
            Fix(
                "better_init",
                "Re-initialise so the units start in their active range",
                'keras.layers.Dense(units, kernel_initializer="he_normal")',
            ),
        ),
    )


def _unlocated(path_break: PathBreak, groups: Sequence[LayerGroup]) -> Account:
    """No break named: the variables and that they never train are still the finding."""
    why = f" ({path_break.why})" if path_break.why else ""
    return Account(
        story=f"Where their path to the loss breaks was not found{why}.",
        reason="their path to the loss is broken",
        fixes=(
            _exclude(path_break)(
                groups,
                "If these variables should not train, stop handing them to the optimizer",
                "if they should train, their path to the loss must be mended; otherwise:",
            ),
        ),
    )


def _other_parameters(path_break: PathBreak, groups: Sequence[LayerGroup]) -> Account:
    """The optimizer holds none of the parameters the loss was computed from."""
    instead = path_break.trained_instead
    shown = ", ".join(f"`{name}`" for name in instead[:4])
    more = f" and {len(instead) - 4} more" if len(instead) > 4 else ""
    built = path_break.optimizer_line
    line = f" ({quoted_line(built)})" if built is not None else ""
    code = (
        "# build the optimizer after the last `model = ...`, from the model the loss uses:\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=...)"
    )
    if built is not None and built.code:
        code = f"# move this line below the one that builds the model the loss uses:\n{built.code}"
    return Account(
        story=f"They belong to no module the step ran: the loss's gradients went to "
        f"{count(len(instead), 'other parameter')} ({shown}{more}), of the model the "
        "forward pass ran, and no optimizer updates those. The optimizer"
        f"{line} was built from another model object: one made again after the optimizer "
        "(`model = Net(...)` after `optimizer = ...(model.parameters())`), or a copy.",
        reason="the optimizer holds another model's parameters",
        fixes=(
            Fix(
                "rebuild_optimizer",
                "Build the optimizer from the parameters of the model the loss uses, after "
                "that model is built",
                code,
            ),
        ),
    )


_ACCOUNTS: dict[str, Callable[[PathBreak, Sequence[LayerGroup]], Account]] = {
    NON_DIFFERENTIABLE: _non_differentiable,
    OUTSIDE_TAPE: _outside_tape,
    LEFT_FRAMEWORK: _left_framework,
    NOT_USED: _not_used,
    NEVER_READ: _never_read,
    FROZEN: _frozen,
    ZERO_GRADIENT: _zero_gradient,
    UNLOCATED: _unlocated,
    NOT_WATCHED: _not_watched,
    OTHER_PARAMETERS: _other_parameters,
}
# The not-fixes that still hold for an optimizer of another model's parameters: zeros
# for None move nothing either, and anomaly mode sees no backward op of theirs.
_STILL_NOT_MOVING = frozenset({"zero_grad_to_zeros", "detect_anomaly"})
# The not-fixes that still hold for variables a tape was not watching: a persistent
# tape watches what the same tape would.
_SAME_WATCHING = frozenset({"persistent_tape"})


def _on_break_line(fix: Fix, source: SourceLine | None) -> Fix:
    """A fix that rewrites the line where the path breaks, as an edit of that line (a
    finding with no origin has no line of its own for `rewrite` to replace)."""
    if not fix.rewrite or source is None or not source.code:
        return fix
    edit = Edit(source.file, source.line, source.line, fix.rewrite, (source.code.strip(),))
    return replace(fix, rewrite=(), edits=(edit,))


def _exclude(path_break: PathBreak) -> Callable[..., Fix]:
    """The fix that stops training the cut variables, in the break's framework."""
    if _in_torch(path_break):
        return torch_remedies.exclude_unused_parameters
    return path_remedies.exclude_unused_variables


def _op_and_source(path_break: PathBreak) -> tuple[str, SourceLine | None]:
    node = path_break.node
    return (node.op_type, node.source) if node is not None else ("an op", None)


def _on(source: SourceLine | None) -> str:
    """ " on your line train.py:141 `tokens = tf.argmax(logits)`", or "" when unknown."""
    return f" on your line {quoted_line(source)}" if source is not None else ""


def _place(source: SourceLine) -> tuple[str, int]:
    """The file and line of a user's line (two ops of one line differ in their columns)."""
    return source.file, source.line


def _at(source: SourceLine | None) -> str:
    """ " at train.py:141", or "" when unknown."""
    return f" at {line_ref(source)}" if source is not None else ""
