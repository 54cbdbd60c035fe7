"""A step that fails on one unlucky stateful random draw is replayed with that same draw."""

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import gradient_doctor  # noqa: E402
from gradient_doctor.errors import TrainingStopped  # noqa: E402
from gradient_doctor.tf_adapter.step.random_draws import replaying  # noqa: E402


def test_replaying_hands_out_the_kept_draws_in_order_then_draws_afresh():
    kept = [("RandomStandardNormal", tf.constant([7.0, 8.0])), ("RandomUniform", tf.zeros([3]))]
    with replaying(kept):
        first = tf.random.normal([2])
        second = tf.random.uniform([3])
        third = tf.random.normal([2])
    np.testing.assert_array_equal(first.numpy(), [7.0, 8.0])
    np.testing.assert_array_equal(second.numpy(), [0.0, 0.0, 0.0])
    assert not np.array_equal(third.numpy(), [7.0, 8.0])


def test_a_draw_of_another_shape_ends_the_substitution():
    kept = [("RandomStandardNormal", tf.constant([7.0, 8.0])), ("RandomUniform", tf.zeros([3]))]
    with replaying(kept):
        other = tf.random.normal([5])  # not the kept draw: fresh from here on
        later = tf.random.uniform([3])
    assert other.shape == (5,)
    assert float(tf.reduce_sum(later)) > 0.0


def _unlucky_loop():
    """A custom loop whose loss is log(0) on the ~3% of steps whose draw falls below 0.03."""
    tf.random.set_seed(5)
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01)

    @tf.function
    def train_step(x):
        draw = tf.random.uniform([])
        keep = tf.where(draw < 0.03, 0.0, 1.0)  # an unlucky draw zeroes the weight
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x))) - tf.math.log(keep)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return gradient_doctor.watch(train_step, optimizer=optimizer, verbose=False, trial_steps=0)


def test_the_replay_of_a_custom_loop_draws_what_the_failing_step_drew():
    step = _unlucky_loop()
    x = np.ones((4, 3), "float32")
    with pytest.raises(TrainingStopped):
        for _ in range(1000):
            step(x)
    (finding,) = step.report().problems
    assert finding.step > 0  # it took some lucky steps first
    # A fresh draw would be finite 97% of the time: only the kept one names the op.
    assert finding.origin is not None and finding.origin.op == "Log"
    assert finding.category == "forward_domain"
