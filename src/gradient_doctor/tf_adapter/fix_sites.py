"""Where fixes to the training setup go: the line that built the optimizer, and what it is."""

from __future__ import annotations

import keras

from gradient_doctor.core.knowledge.optimizer_rewrite import OptimizerSite
from gradient_doctor.tf_adapter import loss_scale
from gradient_doctor.tf_adapter.creation_sites import creation_line


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
