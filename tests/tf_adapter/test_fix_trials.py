"""Fix trials on real tiny models: the safe op is swapped in, and the user's model is untouched."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from gradient_doctor import Doctor
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.tf_adapter.op_substitution import safe_version, substituted
from gradient_doctor.tf_adapter.source_frames import display_path

THIS_FILE = display_path(__file__)


def _two_roots(x):
    first = tf.sqrt(x)  # the line the trial swaps
    second = tf.sqrt(x)  # another line, left alone
    return first, second


def _line_of(text: str) -> int:
    lines = open(__file__).read().splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line and "_line_of" not in line)


def test_only_the_op_on_the_origin_line_is_swapped_and_its_gradient_is_finite():
    source = SourceLine(THIS_FILE, _line_of("the line the trial swaps"), "")
    x = tf.constant([0.0, 4.0])

    def gradients(x):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            first, second = _two_roots(x)
        return tape.gradient(first, x), tape.gradient(second, x), first

    with substituted("Sqrt", source, safe_version("safe_sqrt", "Sqrt", None)) as replaced:
        concrete = tf.function(gradients).get_concrete_function(x)
    assert len(replaced) == 1
    safe_grad, plain_grad, value = concrete(x)
    np.testing.assert_allclose(value.numpy(), [0.0, 2.0])
    np.testing.assert_allclose(safe_grad.numpy(), [0.0, 0.25])  # sqrt's own gradient: inf at 0
    assert np.isinf(plain_grad.numpy()[0])


def test_exp_is_only_shifted_when_the_softmax_axis_is_known():
    assert safe_version("stable_softmax", "Exp", None) is None
    shifted = safe_version("stable_softmax", "Exp", -1)
    x = tf.constant([[1000.0, 999.0]])
    weights = shifted(x)
    np.testing.assert_allclose(
        (weights / tf.reduce_sum(weights, -1, keepdims=True)).numpy(),
        tf.nn.softmax(x).numpy(),
        rtol=1e-6,
    )
    assert safe_version("stable_softmax", "Log", -1) is None  # a family fixes its own ops only


class _Distance(keras.layers.Layer):
    """Length of each row of a projection: tf.norm, singular at a zero row."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 4), initializer="ones")

    def call(self, x):
        h = tf.matmul(x, self.kernel)
        return tf.norm(h, axis=-1, keepdims=True)


def _fit(trial_steps):
    keras.utils.set_random_seed(3)
    x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
    x[37] = 0.0  # batch 4 (of 8) holds a zero row: the norm's gradient is 0/0 there
    y = np.ones((64, 1), "float32")
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dropout(0.1), _Distance(), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    doctor = Doctor(verbose=False, trial_steps=trial_steps)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[doctor])
    return model, doctor.report()


@pytest.fixture(scope="module")
def fitted_with_trials():
    return _fit(trial_steps=30)


def test_safe_norm_is_verified_on_a_zero_row(fitted_with_trials):
    _, report = fitted_with_trials
    problem = report.problems[0]
    assert (problem.category, problem.origin.op, problem.step) == (
        "backward_singularity",
        "SqrtGrad",
        4,
    )
    fix = next(f for f in problem.fixes if f.family == "safe_norm")
    assert fix.verified is True, fix.evidence
    assert "all 30 steps finite" in fix.evidence


def test_trials_leave_the_model_and_optimizer_as_training_left_them(fitted_with_trials):
    tried, _ = fitted_with_trials
    untried, report = _fit(trial_steps=0)
    assert all(f.verified is None for f in report.problems[0].fixes)
    # Every variable, the dropout's seed state included (trials step it back, then restore).
    assert any(v.dtype.startswith("uint") or "int" in v.dtype for v in tried.variables)
    for a, b in zip(tried.variables, untried.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(tried.optimizer.variables, untried.optimizer.variables, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
