"""Probability losses handed a layer's raw output, noticed as Keras computes them.

Keras's cross-entropies (`categorical_crossentropy`, `sparse_categorical_crossentropy`,
`binary_crossentropy`: the losses `compile` names, their classes, `keras.ops`' and
`keras.losses`' functions all end in these three) read their predictions as
probabilities unless told `from_logits=True`. Given a softmax's or sigmoid's output
they take the logits back; given a layer's raw output they clip it, silently (see
`core/knowledge/rules/loss_input.py`). Under `gradient-doctor run` each call is looked
at as Keras makes it, once per loss and layer:

- traced (a `fit` step, a `tf.function`): the op that made the predictions, through
  ops that only reshape or cast them. A matmul, a convolution, or a bias added to one
  is a layer's raw output, any real number; the layer is the one whose variable the op
  reads. Anything else (a clip, an exp, a user's own normalisation) is left alone.
- eager: their values, on the first calls only: one below 0 or above 1 is no
  probability.

What is found goes to `on_found` as a `LossInput`, with the lines a fix edits: the
layer's creation line, and the loss's (the `compile` call that named it, the line
that built the loss object, or the user's call of the function).
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable, Iterable
from types import FrameType

import keras
import numpy as np
import tensorflow as tf

from gradient_doctor.core.evidence import LossInput
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.source_frames import is_user_file, source_line, statement_line
from gradient_doctor.tf_adapter._tf_internals import autograph_origin, keras_nn
from gradient_doctor.tf_adapter.hooks import compile_sites, creation_sites

# Each loss -> the activation whose output it reads.
LOSSES = {
    "categorical_crossentropy": "softmax",
    "sparse_categorical_crossentropy": "softmax",
    "binary_crossentropy": "sigmoid",
}
# TensorFlow's losses that apply their own squash to logits -> that squash's op.
LOGIT_LOSSES = {
    "sigmoid_cross_entropy_with_logits": "Sigmoid",
    "softmax_cross_entropy_with_logits": "Softmax",
    "sparse_softmax_cross_entropy_with_logits": "Softmax",
}
# Ops that pass a value on unchanged but for its shape or dtype.
_PASS_THROUGH = frozenset({"Identity", "Cast", "Reshape", "Squeeze", "ExpandDims"})
# Ops whose output is a layer's raw output: a weighted sum of its inputs.
_WEIGHTED_SUMS = frozenset(
    {
        "MatMul",
        "BatchMatMulV2",
        "BatchMatMulV3",
        "Einsum",
        "Conv1D",
        "Conv2D",
        "Conv3D",
        "DepthwiseConv2dNative",
    }
)
_BIAS_ADDS = frozenset({"BiasAdd", "AddV2", "Add"})
# How far up from the raw output a read of the layer's own variable is looked for.
_VARIABLE_DEPTH = 4
# Eager calls whose values are read, per loss (a host copy each).
_EAGER_LOOKS = 3
# Loss objects built by the user's own line (not by Keras's `compile`) -> that line.
_built_by_user: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class LossInputs:
    """The patches of the three cross-entropies, and what they found so far.

    Args:
        on_found: called with each `LossInput` found (once per loss and layer).
        layers: the layers whose variables may make a loss's input: by default those
            built under `gradient-doctor run` (`creation_sites`); the callback, which
            sees no layer built, passes its model's.
    """

    def __init__(
        self,
        on_found: Callable[[LossInput], None],
        layers: Callable[[], Iterable] = creation_sites.recorded_layers,
    ) -> None:
        self._on_found = on_found
        self._layers = layers
        self._seen: set[tuple[str, str]] = set()
        self._eager_looks: dict[str, int] = {}

    def patches(self) -> list[tuple[object, str, object]]:
        """(owner, attribute, replacement) for each cross-entropy and for the loss
        classes' constructor (which notes the user's line that built a loss); the
        caller installs them and puts the originals back."""
        found = [(keras_nn, name, self._watched(name, getattr(keras_nn, name))) for name in LOSSES]
        found += [
            (tf.nn, name, self._watched_logits(name, getattr(tf.nn, name))) for name in LOGIT_LOSSES
        ]
        return [*found, (keras.losses.Loss, "__init__", _recording_init(keras.losses.Loss))]

    def _watched_logits(self, name: str, original):
        """`tf.nn`'s loss `name`, which applies its own squash, looking at its logits."""

        @functools.wraps(original)
        def with_logits(*args, **kwargs):
            logits = kwargs.get("logits", args[1] if len(args) > 1 else None)
            try:
                self._look_at_logits(name, logits, sys._getframe(1))
            except Exception:  # the doctor's look must never break the user's loss
                pass
            return original(*args, **kwargs)

        return with_logits

    def _look_at_logits(self, name: str, logits, caller: FrameType) -> None:
        """Report `logits` that a sigmoid or softmax made (the op that made them, traced;
        eagerly, a Keras activation's output, which keeps its logits): squashed twice."""
        squash = LOGIT_LOSSES[name]
        if isinstance(logits, tf.Variable) or not isinstance(logits, tf.Tensor):
            return
        layer = None
        if hasattr(logits, "op") and not tf.executing_eagerly():
            made = _through(logits.op)
            if made.type != squash:
                return
            raw = _raw_output(made.inputs[0].op) if made.inputs else None
            layer = _owning_layer(raw, self._layers()) if raw is not None else None
            key = (name, layer.name if layer is not None else made.name)
        elif hasattr(logits, "_keras_logits"):  # a Keras sigmoid or softmax activation's
            key = (name, "eager")
        else:
            return
        if key in self._seen:
            return
        line = next((line for frame in _frames(caller) if (line := _user_line(frame))), None)
        self._seen.add(key)
        activation = squash.lower()
        fields = _layer_fields(layer)
        self._on_found(
            LossInput(
                loss=name,
                expects="logits",
                activation=activation,
                producer=activation,
                loss_site=line,
                loss_argument=("call", name) if line is not None else None,
                made_at=fields["layer_site"],  # the squash is the layer's activation
                **fields,
            )
        )

    def _watched(self, name: str, original):
        @functools.wraps(original)
        def cross_entropy(target, output, from_logits=False, *args, **kwargs):
            if not from_logits and not hasattr(output, "_keras_logits"):
                try:
                    self._look(name, output, sys._getframe(1))
                except Exception:  # the doctor's look must never break the user's loss
                    pass
            return original(target, output, from_logits, *args, **kwargs)

        return cross_entropy

    def _look(self, name: str, output, caller: FrameType) -> None:
        activation = LOSSES[name]
        values = producer = layer = None
        if isinstance(output, tf.Variable) or not isinstance(output, tf.Tensor):
            return
        if hasattr(output, "op") and not tf.executing_eagerly():
            raw = _raw_output(output.op)
            if raw is None:
                return
            producer, layer = raw.type, _owning_layer(raw, self._layers())
            key = (name, layer.name if layer is not None else raw.name)
        else:
            looks = self._eager_looks.get(name, 0)
            if looks >= _EAGER_LOOKS or not output.dtype.is_floating:
                return
            self._eager_looks[name] = looks + 1
            array = output.numpy()
            array = array[np.isfinite(array)]  # NaN is no verdict on the kind of score
            if array.size == 0:
                return
            low, high = float(np.min(array)), float(np.max(array))
            if 0.0 <= low and high <= 1.0:
                return
            values, key = (low, high), (name, "eager")
        if key in self._seen:
            return
        named = _loss_site(name, caller)
        if named is None:  # a metric's cross-entropy: no loss reads it
            return
        self._seen.add(key)
        loss_site, loss_argument = named
        self._on_found(
            LossInput(
                loss=name,
                expects="probabilities",
                activation=activation,
                producer=producer,
                loss_site=loss_site,
                loss_argument=loss_argument,
                values=values,
                **_layer_fields(layer),
            )
        )


def _layer_fields(layer) -> dict:
    """The `LossInput` fields naming the layer that made the loss's input (its name,
    class and the user's line that built it); Nones for no layer."""
    if layer is None:
        return {"layer": None, "layer_class": None, "layer_site": None}
    return {
        "layer": layer.name,
        "layer_class": type(layer).__name__,
        "layer_site": creation_sites.creation_line(layer),
    }


def _through(op):
    """The op that made `op`'s value, past ops that only reshape or cast it."""
    while op.type in _PASS_THROUGH and op.inputs:
        op = op.inputs[0].op
    return op


def _raw_output(op):
    """The op whose output is a layer's raw output that `op` passes on, or None."""
    op = _through(op)
    if op.type in _WEIGHTED_SUMS:
        return op
    if op.type in _BIAS_ADDS and any(_through(t.op).type in _WEIGHTED_SUMS for t in op.inputs):
        return op
    return None


def _owning_layer(op, candidates: Iterable):
    """The layer whose variable is read closest upstream of `op` (its bias or kernel),
    among `candidates`; None when none is found."""
    captured = {id(internal.op): external for external, internal in op.graph.captures}
    owners = {}  # a variable's handle -> the innermost layer holding it (not a model)
    layers = [layer for layer in candidates if not isinstance(layer, keras.Model)]
    for layer in sorted(layers, key=lambda layer: -len(layer.weights)):
        for weight in layer.weights:
            handle = getattr(getattr(weight, "value", None), "handle", None)
            if handle is not None:
                owners[id(handle)] = layer
    frontier = [op]
    for _ in range(_VARIABLE_DEPTH):
        following = []
        for current in frontier:
            for tensor in current.inputs:
                external = captured.get(id(tensor.op))
                if external is not None and id(external) in owners:
                    return owners[id(external)]
                following.append(tensor.op)
        frontier = following
    return None


def _loss_site(
    name: str, caller: FrameType
) -> tuple[SourceLine | None, tuple[str, str] | None] | None:
    """The user's line that names the loss, and how it names it (`LossInput.loss_argument`);
    None when a metric computes the cross-entropy (no loss reads it).

    The frames out from the cross-entropy are walked: the user's own frame met first
    called the function itself (`categorical_crossentropy(y, p)`); a loss object met
    first was built by the user's line, or by `compile` from a name; a model met first
    computed a loss its `compile` named.
    """
    frame = caller
    while frame is not None:
        line = _user_line(frame)
        if line is not None:
            return line, ("call", name)
        owner = frame.f_locals.get("self")
        if isinstance(owner, keras.metrics.Metric):
            return None
        if isinstance(owner, keras.losses.Loss) and owner in _built_by_user:
            return _built_by_user[owner], ("call", type(owner).__name__)
        if isinstance(owner, keras.Model):
            named = getattr(owner, "loss", None)
            site = compile_sites.compile_line(owner)
            if isinstance(named, str) and _spelled(named) == _spelled(name) and site is not None:
                return site, ("name", named)
            function = getattr(named, "__name__", None)
            if callable(named) and function is not None and _spelled(function) == _spelled(name):
                return site, ("reference", function)
            return site, None
        frame = frame.f_back
    return None, None


def _frames(frame: FrameType | None):
    """`frame` and its callers, innermost first."""
    while frame is not None:
        yield frame
        frame = frame.f_back


def _spelled(loss: str) -> str:
    """A loss's name as Keras resolves it, whatever its case and underscores
    ("CategoricalCrossentropy" and "categorical_crossentropy" are one loss)."""
    return loss.replace("_", "").lower()


def _user_line(frame: FrameType) -> SourceLine | None:
    """The user's line `frame` runs: its own file's, or an AutoGraph-converted
    function's line in the user's source; None for a library's frame."""
    if is_user_file(frame.f_code.co_filename):
        return statement_line(frame)
    origin = autograph_origin(frame)
    if origin is not None and is_user_file(origin[0]):
        return source_line(origin[0], origin[1], origin[1], None, None)
    return None


def _recording_init(owner: type):
    original = owner.__dict__["__init__"]

    @functools.wraps(original)
    def init(loss, *args, **kwargs):
        original(loss, *args, **kwargs)
        frame = sys._getframe(1)
        # Past the constructors of the loss's own classes (a subclass's super().__init__).
        while frame is not None and frame.f_code.co_name == "__init__":
            if frame.f_locals.get("self") is not loss:
                break
            frame = frame.f_back
        if (
            frame is not None
            and loss not in _built_by_user
            and is_user_file(frame.f_code.co_filename)
        ):
            line = statement_line(frame)
            if line is not None:
                _built_by_user[loss] = line

    return init
