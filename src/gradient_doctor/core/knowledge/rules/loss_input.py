"""A loss handed the wrong kind of score (raw outputs for probabilities, or the reverse):
a silent failure.

Keras's cross-entropies read their predictions as probabilities unless told
`from_logits=True`. Given a softmax's or a sigmoid's output they take its logits back
and compute the loss from them; given anything else they make it look like
probabilities: `categorical_crossentropy` divides the values by their sum, and all
three clip them into [1e-7, 1 - 1e-7] (`sparse_categorical_crossentropy` then takes
their log as the logits). A raw output (a `Dense` with no activation) is any real
number: every prediction the clip moves gets no gradient, and what is left measures
no likelihood of the labels. Nothing becomes non-finite, the loss wanders or rises,
and the run learns little or nothing. A lower learning rate or clipping changes the
size of the updates, not what the loss reads: the fix is the activation the loss
expects on the layer, or telling the loss its inputs are logits.

PyTorch's losses make the same mistakes silently in their own ways. `nll_loss`
(`nn.NLLLoss`) reads log-probabilities, each at most 0, and returns minus the target's
entry: handed raw scores it has no floor, and training pushes the target's score up
without end, the loss falling below zero. `cross_entropy` (`nn.CrossEntropyLoss`) and
`binary_cross_entropy_with_logits` apply their own softmax or sigmoid: handed a
softmax's or sigmoid's output, values in [0, 1], they squash it again, to near-uniform
probabilities whose loss cannot fall far and whose gradients shrink by the first
squash's slope (`probabilities_as_logits`).
"""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence, LossInput
from gradient_doctor.core.findings import Edit, Fix, KeywordEdit, NotFix, SourceLine
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.source.calls import (
    find_call,
    find_method_call,
    grouped,
    is_namespace,
    parses,
    replace_span,
)
from gradient_doctor.core.knowledge.wording import format_number

CATEGORY = "logits_as_probabilities"
SQUASHED_TWICE = "probabilities_as_logits"
# PyTorch's losses that apply their own softmax or sigmoid, and the call that computes
# the loss from log-probabilities; the loss for raw scores in place of `nll_loss`.
_TORCH_LOGIT_LOSSES = frozenset({"cross_entropy", "binary_cross_entropy_with_logits"})
# TensorFlow's (`tf.nn`): the same mistake, a Keras layer's activation the usual squash.
_TF_LOGIT_LOSSES = frozenset(
    {
        "sigmoid_cross_entropy_with_logits",
        "softmax_cross_entropy_with_logits",
        "sparse_softmax_cross_entropy_with_logits",
    }
)
_TORCH_LOG_PROBABILITY_LOSS = "nll_loss"
_FOR_RAW_SCORES = {"nll_loss": "cross_entropy", "NLLLoss": "CrossEntropyLoss"}
# The calls whose output a loss that reads logits must not be handed, by activation.
_SQUASH_CALLS = {"softmax": ("softmax",), "sigmoid": ("sigmoid",)}
_SQUASH_MODULES = {"softmax": "Softmax", "sigmoid": "Sigmoid"}
# Keras's clip bound (`keras.config.epsilon()`, 1e-7 unless the user changed it).
_EPSILON = "1e-07"
# Each loss's class, and what it does with values that are not probabilities.
_KERAS_LOSSES = {
    "categorical_crossentropy": (
        "CategoricalCrossentropy",
        f"divides them by their sum and clips the result into [{_EPSILON}, 1 - {_EPSILON}]",
    ),
    "sparse_categorical_crossentropy": (
        "SparseCategoricalCrossentropy",
        f"clips them into [{_EPSILON}, 1 - {_EPSILON}] and takes their log as the logits",
    ),
    "binary_crossentropy": (
        "BinaryCrossentropy",
        f"clips them into [{_EPSILON}, 1 - {_EPSILON}]",
    ),
}
_SAME_LOSS = (
    "{what} changes the size of each update, not what the loss reads: at any {knob} the "
    "loss still takes the values it is handed for {expects}, which they are not."
)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a probability loss fed values that are not probabilities; decline
    without such evidence (or for a loss this rule does not know)."""
    fed = evidence.loss_input
    if fed is None:
        return None
    if fed.loss in _TORCH_LOGIT_LOSSES:
        return Diagnosis(
            SQUASHED_TWICE, _squashed_twice(fed), _not_fixes("logits"), (_unsquashed_fix(fed),)
        )
    if fed.loss in _TF_LOGIT_LOSSES:
        return Diagnosis(
            SQUASHED_TWICE, _squashed_twice(fed), _not_fixes("logits"), (_linear_layer_fix(fed),)
        )
    if fed.loss == _TORCH_LOG_PROBABILITY_LOSS:
        return Diagnosis(
            CATEGORY, _unbounded_below(fed), _not_fixes("log-probabilities"), (_raw_score_fix(fed),)
        )
    if fed.loss not in _KERAS_LOSSES:
        return None
    loss_class, treatment = _KERAS_LOSSES[fed.loss]
    return Diagnosis(
        CATEGORY, _explanation(fed, treatment), _not_fixes("probabilities"), _fixes(fed, loss_class)
    )


def _not_fixes(expects: str) -> tuple[NotFix, ...]:
    return (
        NotFix(
            "lower_learning_rate",
            _SAME_LOSS.format(what="A lower learning rate", knob="rate", expects=expects),
        ),
        NotFix(
            "gradient_clipping",
            _SAME_LOSS.format(what="Clipping the gradients", knob="clipping norm", expects=expects),
        ),
    )


def _explanation(fed: LossInput, treatment: str) -> str:
    if fed.layer is not None:
        made = f"the raw output of layer `{fed.layer}`"
        if fed.producer is not None:
            made += f" (its {fed.producer}, with no {fed.activation} after it)"
    elif fed.producer is not None:
        made = f"the raw output of a {fed.producer}, with no {fed.activation} after it"
    else:
        made = f"values no {fed.activation} made"
    return (
        f"`{fed.loss}` reads its predictions as {fed.expects} (from_logits=False, the "
        f"default), but they are {made}: any real number{_seen(fed)}. Keras {treatment}: "
        "every "
        "prediction the clip moves gets no gradient, and what is left is no likelihood of "
        "the labels. Nothing becomes non-finite; the model learns little or nothing."
    )


def _fixes(fed: LossInput, loss_class: str) -> tuple[Fix, ...]:
    activation = _activation_fix(fed)
    logits = _from_logits_fix(fed, loss_class)
    return (activation, logits) if activation is not None else (logits,)


def _activation_fix(fed: LossInput) -> Fix | None:
    """The layer given the activation the loss expects, where the layer is known."""
    if fed.layer is None or fed.layer_class is None:
        return None
    title = (
        f"Give layer `{fed.layer}` the {fed.activation} activation: its outputs are then the "
        f"{fed.expects} the loss reads (Keras computes the loss from the logits under the "
        f"{fed.activation}, as stably as from_logits=True), and predict() returns them too"
    )
    return _layer_activation(fed, title, ("linear", None), f'"{fed.activation}"', add=True)


def _from_logits_fix(fed: LossInput, loss_class: str) -> Fix:
    """The loss told that its inputs are logits, where the user's line names it."""
    after = f"predict() then returns logits: apply a {fed.activation} to read probabilities"
    if fed.activation == "sigmoid":
        after += ", and a binary accuracy metric needs threshold=0.0"
    title = f"Tell the loss its inputs are logits with from_logits=True ({after})"
    code = f"loss=keras.losses.{loss_class}(from_logits=True)"
    edits = ()
    site, argument = fed.loss_site, fed.loss_argument
    if site is not None and argument is not None:
        kind, text = argument
        if kind == "call":
            code = f"{text}(..., from_logits=True)  # at {site.file}:{site.line}"
            edits = (KeywordEdit(site, "from_logits", (False,), "True", callee=text, add=True),)
        elif kind in ("name", "reference"):  # `loss="..."`, `loss=keras.losses.<function>`
            edits = (
                KeywordEdit(
                    site,
                    "loss",
                    (text,),
                    f"losses.{loss_class}(from_logits=True)",
                    callee="compile",
                    position=1,
                    keras_path=True,
                    references=kind == "reference",
                ),
            )
    return Fix("from_logits", title, code, keyword_edits=edits)


def _squashed_twice(fed: LossInput) -> str:
    where = f" at {fed.made_at.file}:{fed.made_at.line}" if fed.made_at is not None else ""
    classes = "log(C) for C classes" if fed.activation == "softmax" else "log(2)"
    first = fed.producer or fed.activation
    return (
        f"`{fed.loss}` applies its own {fed.activation} to its input (it reads logits), but "
        f"it is handed the output of a {first}{where}, values in [0, 1]. Squashed "
        f"twice, the probabilities it computes stay close to uniform: the loss cannot fall "
        f"far below {classes}, and every gradient is scaled down by the {first}'s slope. "
        "Nothing becomes non-finite; the model learns slowly, or stalls."
    )


def _unsquashed_fix(fed: LossInput) -> Fix:
    """The first squash removed where the user's line makes it (its argument kept)."""
    first = fed.producer or fed.activation
    reading = "an argmax needs none" if first == "softmax" else "a threshold at 0 needs none"
    title = (
        f"Hand the loss the logits: drop the {first} before it ({fed.loss} applies its own "
        f"{fed.activation}), and apply torch.{first} only where you read probabilities "
        f"({reading})"
    )
    code = f"logits  # in place of torch.{first}(logits, ...), fed to {fed.loss}"
    site = fed.made_at
    edit = _without_squash(site, first) if site is not None else None
    if edit is None:
        return Fix("from_logits", title, code)
    shown = edit.new_lines[0] if edit.new_lines else f"# delete: {edit.old_lines[0]}"
    return Fix("from_logits", title, shown, edits=(edit,))


def _linear_layer_fix(fed: LossInput) -> Fix:
    """TensorFlow's: the layer whose activation made the values built with none (its
    logits then reach the loss), where the layer is known."""
    title = (
        f"Hand `tf.nn.{fed.loss}` the logits: build the layer with no activation (the loss "
        f"applies its own {fed.activation}), and apply tf.nn.{fed.activation} only where you "
        "read probabilities"
    )
    if fed.layer is None or fed.layer_class is None:
        return Fix("from_logits", title, f"logits  # in place of tf.nn.{fed.activation}(logits)")
    title = title.replace("the layer", f"layer `{fed.layer}`", 1)
    return _layer_activation(fed, title, (fed.activation,), "None")


def _layer_activation(fed: LossInput, title: str, was: tuple, new: str, add: bool = False) -> Fix:
    """The fix setting the activation of the layer that made the loss's input to `new`
    (source text), where it now holds one of `was`: a patch of the line that built it
    when that is known, else the call to write (`add`: also where it passes none)."""
    code = f"{fed.layer_class}(..., activation={new})"
    edits = ()
    if fed.layer_site is not None:
        code += f"  # the layer built at {fed.layer_site.file}:{fed.layer_site.line}"
        edits = (
            KeywordEdit(fed.layer_site, "activation", was, new, callee=fed.layer_class, add=add),
        )
    return Fix("activation_change", title, code, keyword_edits=edits)


def _without_squash(site: SourceLine, activation: str) -> Edit | None:
    """The edit of `site` replacing its softmax or sigmoid call by the call's input
    (`F.softmax(self.fc(x), dim=1)` -> `self.fc(x)`, `z.sigmoid()` -> `z`), or taking
    out the squash module a model is built with (`nn.Softmax(dim=1)` in a `Sequential`'s
    arguments, or the line that holds only it); None when the line has neither."""
    code = site.code.strip()
    if not code or site.end_line is not None:
        return None
    module = _without_module(site, code, activation)
    if module is not None:
        return module
    names = _SQUASH_CALLS[activation]
    call = find_call(code, names, site.span)
    if call is not None and call.args and is_namespace(call.prefix):
        new = replace_span(code, call.start, call.end, grouped(call.args[0]))
    else:
        method = find_method_call(code, names, site.span)
        if method is None:
            return None
        new = replace_span(code, method.start, method.end, method.receiver)
    if not parses(new):
        return None
    return Edit(site.file, site.line, site.line, (new,), (code,))


def _without_module(site: SourceLine, code: str, activation: str) -> Edit | None:
    """The edit taking the squash module (`nn.Softmax(...)`) out of the arguments it is
    listed in, with its comma, or deleting a line that holds only it; None without one."""
    built = find_call(code, (_SQUASH_MODULES[activation],))
    if built is None:
        return None
    if code.rstrip(",").strip() == built.text:  # a line of its own in a multi-line list
        return Edit(site.file, site.line, site.line, (), (code,))
    before, after = code[: built.start].rstrip(), code[built.end :].lstrip()
    if before.endswith(","):
        new = before[:-1] + code[built.end :]
    elif after.startswith(","):
        new = code[: built.start] + after[1:].lstrip()
    else:
        return None
    if not parses(new):
        return None
    return Edit(site.file, site.line, site.line, (new,), (code,))


def _seen(fed: LossInput) -> str:
    """ ", here from -3.2 to 4.5" when the values were read, else ""."""
    if fed.values is None:
        return ""
    low, high = fed.values
    return f", here from {format_number(low)} to {format_number(high)}"


def _unbounded_below(fed: LossInput) -> str:
    return (
        f"`{fed.loss}` reads its input as log-probabilities, each at most 0 (the output of "
        "log_softmax), and returns minus the target's entry; but it is handed raw scores"
        f"{_seen(fed)}. The loss then has no floor: training lowers it by pushing the target's "
        "score up without end, with no softmax tying the classes' scores together, and the "
        "loss falls below zero. Nothing becomes non-finite until the scores overflow."
    )


def _raw_score_fix(fed: LossInput) -> Fix:
    """`nll_loss` called by the user's line made `cross_entropy` (log_softmax, then
    nll_loss), or the `NLLLoss()` built there a `CrossEntropyLoss()`; otherwise the code
    to write."""
    title = (
        "Compute the loss from the raw scores with cross_entropy (nn.CrossEntropyLoss), "
        "which is log_softmax followed by nll_loss"
    )
    code = "criterion = nn.CrossEntropyLoss()  # in place of nn.NLLLoss(), on the raw scores"
    site, argument = fed.loss_site, fed.loss_argument
    if site is None or argument is None or site.end_line is not None:
        return Fix("from_logits", title, code)
    kind, name = argument
    line = site.code.strip()
    call = find_call(line, (name,), site.span) if name in _FOR_RAW_SCORES else None
    if kind != "call" or call is None:
        return Fix("from_logits", title, code)
    start = call.start + len(call.prefix)
    new = replace_span(line, start, start + len(call.name), _FOR_RAW_SCORES[name])
    edit = Edit(site.file, site.line, site.line, (new,), (line,))
    return Fix("from_logits", title, new, edits=(edit,))
