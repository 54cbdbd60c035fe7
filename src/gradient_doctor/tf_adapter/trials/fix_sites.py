"""Where fixes to the training setup go: the lines that built the optimizer and the layers."""

from __future__ import annotations

import keras

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.fix_placement import FixSites
from gradient_doctor.core.knowledge.rewrites.finite_rows import PARTS
from gradient_doctor.core.knowledge.rewrites.layer import LayerSite
from gradient_doctor.core.knowledge.rewrites.optimizer import OptimizerSite
from gradient_doctor.tf_adapter._tf_internals import trainable_variables_of
from gradient_doctor.tf_adapter.hooks.creation_sites import (
    creation_line,
    layer_at,
    layer_of_variable,
)
from gradient_doctor.tf_adapter.step import loss_scale


def fix_sites(
    optimizer, evidence: Evidence, fit_call=None, compiled: SourceLine | None = None
) -> FixSites:
    """The optimizer's site, the site of the layer whose weights feed the origin, the
    sites of every layer the optimizer trains, the `fit` line (a `FitCall`; with the parts
    of its data that hold the batch's non-finite values, for the `finite_rows` patch), for
    missing gradients where the path broke, `compiled`, the line that compiled
    the step with XLA, and the line that set a half-precision dtype policy."""
    grew = evidence.growth[0] if evidence.growth else None
    weights_layer = layer_at(grew or evidence.weights_layer)
    return FixSites(
        optimizer=optimizer_site(optimizer),
        weights_layer=layer_site(weights_layer) if weights_layer is not None else None,
        trained_layers=tuple(
            site for layer in trained_layers(optimizer) if (site := layer_site(layer)) is not None
        ),
        fit=fit_call.source if fit_call is not None and fit_call.standardisable() else None,
        fit_targets=(
            fit_call.source if fit_call is not None and fit_call.standardisable("y") else None
        ),
        fit_without_targets=fit_call is not None and fit_call.y is None,
        fit_rows=fit_call.finite_rows(_bad_parts(evidence)) if fit_call is not None else None,
        path_break=evidence.path_break,
        compiled=compiled,
        dtype_policy=overflow.policy_site if (overflow := evidence.update_overflow) else None,
        rate_set_by=_rate_setter(fit_call),
    )


def _bad_parts(evidence: Evidence) -> set[str]:
    """The parts of `fit`'s data (`x`, `y`, `sample_weight`) the failing batch's non-finite
    tensors are; empty when one of them is not a whole part (`x['age']`, a tensor read
    by the user's code)."""
    parts = {bad.tensor for bad in evidence.bad_inputs if bad.read_at is None}
    if len(parts) != len(evidence.bad_inputs) or not parts <= set(PARTS):
        return set()
    return parts


def _rate_setter(fit_call) -> str | None:
    """The callback passed to `fit` that sets the learning rate at each epoch's start
    (`LearningRateScheduler`), named, or None."""
    for callback in fit_call.callbacks if fit_call is not None else ():
        if isinstance(callback, keras.callbacks.LearningRateScheduler):
            return "the `LearningRateScheduler` callback passed to `fit`"
    return None


def optimizer_site(optimizer) -> OptimizerSite | None:
    """The user's optimizer (the inner one of a loss-scaling optimizer) and its line, or None.

    The learning rate is read as the optimizer holds it: a fixed number (a variable)
    or a schedule (a `LearningRateSchedule` or a callable).
    """
    if optimizer is None:
        return None
    inner = loss_scale.inner_optimizer(optimizer)
    source = creation_line(inner) or creation_line(optimizer)
    if source is None:
        return None
    rate = getattr(inner, "_learning_rate", None)
    schedule = isinstance(rate, keras.optimizers.schedules.LearningRateSchedule) or (
        callable(rate) and not hasattr(rate, "numpy")
    )
    value = None
    if not schedule:
        try:
            value = float(inner.learning_rate)
        except (TypeError, ValueError, AttributeError):
            value = None
    return OptimizerSite(source, type(inner).__name__, value, schedule)


def layer_site(layer) -> LayerSite | None:
    """A layer, its line and what a fix to it needs to know, or None without a line."""
    source = creation_line(layer)
    if source is None:
        return None
    activation = getattr(layer, "activation", None)
    initializer = getattr(layer, "kernel_initializer", None)
    recurrent = getattr(layer, "recurrent_initializer", None)  # a recurrent cell's
    gain = getattr(recurrent, "gain", None)
    return LayerSite(
        source,
        type(layer).__name__,
        getattr(layer, "path", layer.name),
        getattr(activation, "__name__", None),
        type(initializer).__name__ if initializer is not None else None,
        type(recurrent).__name__ if recurrent is not None else None,
        float(gain) if isinstance(gain, int | float) else None,
        bias_constant(layer),
    )


def bias_constant(layer) -> float | None:
    """The value a layer's biases start at when its bias initializer is a constant, else
    None (a patch zeroing a constant below 0 and its trial both read it here)."""
    initializer = getattr(layer, "bias_initializer", None)
    if type(initializer).__name__ != "Constant":
        return None
    try:
        return float(initializer.value)
    except (AttributeError, TypeError, ValueError):  # a tensor of several values
        return None


def trained_layers(optimizer) -> list:
    """The layers owning the variables `optimizer` trains, once each, in order."""
    inner = loss_scale.inner_optimizer(optimizer) if optimizer is not None else None
    layers = []
    for variable in trainable_variables_of(inner) if inner is not None else ():
        layer = layer_of_variable(variable)
        if layer is not None and all(layer is not seen for seen in layers):
            layers.append(layer)
    return layers


def layers_built_at(optimizer, edits) -> list:
    """The trained layers whose construction lies on a line one of `edits` changes."""
    found = []
    for layer in trained_layers(optimizer):
        source = creation_line(layer)
        if source is None:
            continue
        last = source.end_line or source.line
        if any(e.file == source.file and source.line <= e.line <= last for e in edits):
            found.append(layer)
    return found
