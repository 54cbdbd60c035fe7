"""The clipping a Keras optimizer applies, and whether the update it would apply is finite.

Keras clips the gradients inside `optimizer.apply`, after the guard has read them:
gradients whose squares overflow float32 (a loss scaled by 1e21) are clipped by
`clipvalue` to finite values that Adam's moments take without overflow. The guard
judges such an update by the gradients as the optimizer clips them, with the
optimizer's own clipping (`clipped_gradients`), so that a clipped run (and a clipping trial) is
judged by what it would write into the weights.
"""

from __future__ import annotations

import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import BaseOptimizer, clipped_gradients

CLIPPING_ARGUMENTS = ("clipnorm", "clipvalue", "global_clipnorm")


def clipping_of(optimizer) -> dict[str, float]:
    """The clipping a Keras optimizer applies, by argument name (none set: empty).

    Plain Python, as the guard's traced step calls it: AutoGraph would otherwise try
    to convert it and warn on the user's output (it cannot convert an assignment
    expression in a comprehension).
    """
    values = {name: getattr(optimizer, name, None) for name in CLIPPING_ARGUMENTS}
    return {name: value for name, value in values.items() if value is not None}


def clipped_finite(optimizer, gradients: list) -> tf.Tensor | None:
    """Whether the update `optimizer` would apply is finite, judged on the gradients as
    it clips them, or None when the optimizer does not clip (its update then sees the
    gradients as they are).

    Global-norm clipping turns every gradient NaN when the norm overflows (Keras's
    `clip_by_global_norm`), norm clipping turns an overflowing variable's gradient to
    zero, value clipping maps +-inf to the bound and keeps NaN: this reads the result.
    A gradient that is itself inf or NaN still fails, though value clipping would map
    an inf to the bound: it is a numerical failure of the step (a root's gradient at 0,
    say), which clipping would hide, not a large gradient clipping is there to bound.

    Args:
        optimizer: the Keras optimizer that will apply the update.
        gradients: the dense floating-point gradients (an `IndexedSlices`' values).
    """
    if not clipping_of(optimizer) or not isinstance(optimizer, BaseOptimizer):
        return None
    present = [g for g in gradients if g is not None]
    clipped = [g for g in clipped_gradients(optimizer, present) if g is not None]
    return tf.reduce_all(
        tf.stack([tf.reduce_all(tf.math.is_finite(g)) for g in (*present, *clipped)])
    )
