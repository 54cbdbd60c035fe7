"""A loss that reads probabilities, fed a layer's raw output: a silent failure.

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
"""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence, LossInput
from gradient_doctor.core.findings import Fix, KeywordEdit, NotFix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.wording import format_number

CATEGORY = "logits_as_probabilities"
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
    "loss still takes raw outputs for probabilities, and the predictions it clips still "
    "get no gradient."
)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a probability loss fed values that are not probabilities; decline
    without such evidence (or for a loss this rule does not know)."""
    fed = evidence.loss_input
    if fed is None or fed.loss not in _KERAS_LOSSES:
        return None
    loss_class, treatment = _KERAS_LOSSES[fed.loss]
    return Diagnosis(
        category=CATEGORY,
        explanation=_explanation(fed, treatment),
        not_fixes=(
            NotFix(
                "lower_learning_rate",
                _SAME_LOSS.format(what="A lower learning rate", knob="rate"),
            ),
            NotFix(
                "gradient_clipping",
                _SAME_LOSS.format(what="Clipping the gradients", knob="clipping norm"),
            ),
        ),
        fixes=_fixes(fed, loss_class),
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
    seen = ""
    if fed.values is not None:
        low, high = fed.values
        seen = f", here from {format_number(low)} to {format_number(high)}"
    return (
        f"`{fed.loss}` reads its predictions as {fed.expects} (from_logits=False, the "
        f"default), but they are {made}: any real number{seen}. Keras {treatment}: every "
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
    code = f'{fed.layer_class}(..., activation="{fed.activation}")'
    edits = ()
    if fed.layer_site is not None:
        code += f"  # the layer built at {fed.layer_site.file}:{fed.layer_site.line}"
        edits = (
            KeywordEdit(
                fed.layer_site,
                "activation",
                ("linear", None),
                f'"{fed.activation}"',
                callee=fed.layer_class,
                add=True,
            ),
        )
    return Fix("activation_change", title, code, keyword_edits=edits)


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
        elif kind == "name":
            edits = (
                KeywordEdit(
                    site,
                    "loss",
                    (text,),
                    f"losses.{loss_class}(from_logits=True)",
                    callee="compile",
                    position=1,
                    keras_path=True,
                ),
            )
    return Fix("from_logits", title, code, keyword_edits=edits)
