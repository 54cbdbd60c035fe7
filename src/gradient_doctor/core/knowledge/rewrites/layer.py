"""Rewrite the lines that build the user's layers: bounded weights, a better initialisation.

A fix to a layer goes where the user built it (`layers.Dense(64, activation="relu")`
becomes `layers.Dense(64, activation="relu", kernel_initializer="he_normal")`); a line
that builds several layers (a list comprehension) changes them all, and the trial
changes the same layers.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from gradient_doctor.core.findings import Edit, SourceLine
from gradient_doctor.core.knowledge.source.syntax_edit import (
    callee,
    calls_on,
    combined,
    keras_spelling,
    literal,
    parse,
    set_keyword,
)

# Activations whose layers train best from He's initialisation (Keras starts from Glorot's).
RELU_FAMILY = frozenset({"relu", "leaky_relu", "elu", "selu", "gelu", "silu", "swish", "relu6"})
# The bound `constrain_weights` puts on each unit's incoming weights.
MAX_NORM = 3.0


@dataclass(frozen=True)
class LayerSite:
    """One of the user's layers, as a fix to it needs to know it.

    Attributes:
        source: the line (or lines) that built it.
        class_name: its class, e.g. "Dense".
        path: its Keras path, e.g. "sequential/dense_3".
        activation: its activation's name, or None.
        initializer: its kernel initializer's class name, e.g. "GlorotUniform", or None.
        recurrent_initializer: for a recurrent cell, its recurrent kernel's initializer's
            class name, e.g. "Orthogonal"; None for other layers.
        recurrent_gain: that initializer's gain, when it has one.
        bias_constant: the value its bias starts at when its bias initializer is a
            constant below 0 (`Constant(-8.0)`: every unit of the ReLU family below its
            threshold from the start), else None.
    """

    source: SourceLine
    class_name: str
    path: str
    activation: str | None = None
    initializer: str | None = None
    recurrent_initializer: str | None = None
    recurrent_gain: float | None = None
    bias_constant: float | None = None


def _layer_call(site: LayerSite, lines: Sequence[str]):
    """(tree, the call on the site's line that built the layer, the file's lines). A
    cell Keras built for the user's recurrent layer is found by that layer's call
    (`SimpleRNN(...)` for a `SimpleRNNCell`)."""
    tree, text = parse(lines)
    if tree is None:
        return None, None, text
    names = (site.class_name, site.class_name.removesuffix("Cell"))
    calls = [c for c in calls_on(tree, site.source) if callee(c.func) in names]
    return tree, _at_column(calls, site.source, text), text


def _at_column(calls: list[ast.Call], source: SourceLine, text: Sequence[str]) -> ast.Call | None:
    """The call that built the layer: of several on its line (`Dense(64), Dense(1)`),
    the one at the column the layer was built from, when it was recorded; else the first."""
    span = source.span
    if len(calls) > 1 and span is not None and 1 <= source.line <= len(text):
        line = text[source.line - 1]
        indent = len(line) - len(line.lstrip())
        for call in calls:
            if call.lineno == source.line and call.col_offset - indent == span[0]:
                return call
    return calls[0] if calls else None


def constrain_kernel(site: LayerSite, lines: Sequence[str]) -> Edit | None:
    """An edit bounding the layer's kernel with `MaxNorm(MAX_NORM)`, or None."""
    tree, call, text = _layer_call(site, lines)
    constraint = keras_spelling(tree, "constraints.MaxNorm") if tree is not None else None
    if call is None or constraint is None:
        return None
    value = f"{constraint}(max_value={literal(MAX_NORM)})"
    return set_keyword(text, call, "kernel_constraint", value, site.source.file)


def he_initialised(site: LayerSite, lines: Sequence[str]) -> Edit | None:
    """An edit giving the layer He's initialisation (and biases that start at 0, in place
    of a constant below 0 that puts its units below their threshold), or None when the
    call already names a kernel initializer or is not found."""
    tree, call, text = _layer_call(site, lines)
    if call is None or any(k.arg == "kernel_initializer" for k in call.keywords):
        return None
    changes: list = [("add", 'kernel_initializer="he_normal"')]
    if starts_below_threshold(site):
        bias = next((k.value for k in call.keywords if k.arg == "bias_initializer"), None)
        changes.append(
            (bias, '"zeros"') if bias is not None else ("add", 'bias_initializer="zeros"')
        )
    return combined(text, call, changes, site.source.file)


def starts_below_threshold(site: LayerSite) -> bool:
    """A layer of the ReLU family whose biases start at a constant below 0."""
    return (site.activation or "") in RELU_FAMILY and (site.bias_constant or 0.0) < 0


def wants_he_init(site: LayerSite) -> bool:
    """True for a layer of the ReLU family still on Keras's default Glorot initialisation."""
    return (site.activation or "") in RELU_FAMILY and site.initializer in (None, "GlorotUniform")


# The initializers that suit a layer's activation: He's for the ReLU family, Glorot's
# (Keras's default) for the rest.
_HE = frozenset({"HeNormal", "HeUniform"})
_GLOROT = frozenset({None, "GlorotUniform", "GlorotNormal"})


def initialised_for_its_activation(site: LayerSite) -> bool:
    """True for a layer already drawn as a better initialisation would draw it: He's for
    the ReLU family, Glorot's for any other activation (a sigmoid, a tanh, none)."""
    if (site.activation or "") in RELU_FAMILY:
        return site.initializer in _HE
    return site.initializer in _GLOROT


# Recurrent initializers that keep the state's scale at gain 1 (Keras's default is the first).
_SCALE_KEEPING = frozenset({"Orthogonal", "Identity"})


def wants_orthogonal_recurrence(site: LayerSite) -> bool:
    """True for a recurrent cell whose recurrent kernel was drawn to change the state's
    scale at each time step: an orthogonal or identity one of gain above 1, or one of
    another initializer (Keras's own default is orthogonal of gain 1)."""
    if site.recurrent_initializer is None:
        return False
    if site.recurrent_initializer in _SCALE_KEEPING:
        return site.recurrent_gain is not None and site.recurrent_gain > 1.0
    return True


def orthogonal_recurrence(site: LayerSite, lines: Sequence[str]) -> Edit | None:
    """An edit drawing the layer's recurrent kernel orthogonal, or None."""
    _, call, text = _layer_call(site, lines)
    if call is None:
        return None
    return set_keyword(text, call, "recurrent_initializer", '"orthogonal"', site.source.file)
