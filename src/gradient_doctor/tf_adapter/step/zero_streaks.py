"""Count, inside the compiled step, how many steps in a row each gradient was exactly zero."""

from __future__ import annotations

import tensorflow as tf

from gradient_doctor.tf_adapter.step.doctor_variables import doctor_variable


class ZeroStreaks:
    """One small integer vector per optimizer variable list, updated every step.

    A gradient is "exactly zero" when its sum of squares (already computed for
    the global norm) is 0, so the count adds no pass over the gradients.
    """

    def __init__(self) -> None:
        self._streaks: dict[tuple, tuple[tf.Variable, list]] = {}

    def update(self, variables: list, squares: tf.Tensor) -> tf.Tensor:
        """Advance the streaks of `variables`; returns the longest streak (0 if not kept).

        Args:
            variables: the variables updated, in the order of `squares`.
            squares: float32 vector, each gradient's sum of squares.
        """
        key = tuple(id(v) for v in variables)
        if key not in self._streaks:
            try:
                with tf.init_scope():
                    counter = doctor_variable(
                        tf.zeros([len(variables)], tf.int32), "gradient_doctor_zero_streaks"
                    )
            except ValueError:  # a retrace may not create variables: go without
                return tf.constant(0.0)
            self._streaks[key] = (counter, list(variables))
        counter, _ = self._streaks[key]
        zero = tf.equal(squares, 0.0)
        streaks = tf.where(zero, counter + 1, tf.zeros_like(counter))
        counter.assign(streaks)
        return tf.cast(tf.reduce_max(streaks), tf.float32)

    def variables_at_least(self, length: int) -> list:
        """The variables whose gradient has been zero for `length` steps or more."""
        found = []
        for counter, variables in self._streaks.values():
            values = counter.numpy()
            found += [v for v, streak in zip(variables, values) if streak >= length]
        return found

    def tracked(self) -> list:
        """Every variable whose streak is counted."""
        return [v for _, variables in self._streaks.values() for v in variables]

    def reset(self) -> None:
        """Start counting again (after a diagnosis)."""
        for counter, _ in self._streaks.values():
            counter.assign(tf.zeros_like(counter))
