"""Mixed precision: normal loss-scale adjustments pass untouched; real overflows are diagnosed."""

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import gradient_doctor  # noqa: E402
from gradient_doctor.core.dtype_limits import dtype_limits  # noqa: E402


@pytest.fixture(autouse=True)
def float32_policy_after():
    """Each test sets its own policy; the rest of the session runs in float32."""
    yield
    keras.mixed_precision.set_global_policy("float32")


def _regression_data(rows=256):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 8)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def _fit_healthy(policy, callbacks, initial_scale=None):
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(3)
    x, y = _regression_data()
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1, dtype="float32"),
        ]
    )
    optimizer = keras.optimizers.SGD(0.01)
    if initial_scale is not None:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=initial_scale)
    model.compile(optimizer=optimizer, loss="mse")
    history = model.fit(
        x, y, batch_size=32, epochs=4, shuffle=False, verbose=0, callbacks=callbacks
    )
    return history.history["loss"], [w.numpy() for w in model.weights], model.optimizer


def test_loss_scale_adjustments_are_healthy_and_change_nothing():
    # 2**20 is far too high: the first steps' float16 gradients overflow, the optimizer
    # skips them and halves the scale itself, as it is meant to.
    plain_losses, plain_weights, plain_optimizer = _fit_healthy("mixed_float16", [], 2.0**20)
    doctor = gradient_doctor.Doctor(verbose=False)
    losses, weights, optimizer = _fit_healthy("mixed_float16", [doctor], 2.0**20)
    steps = 4 * 8
    assert int(plain_optimizer.iterations.numpy()) < steps  # some steps really were skipped
    assert losses == plain_losses
    for plain, watched in zip(plain_weights, weights, strict=True):
        np.testing.assert_array_equal(plain, watched)
    assert optimizer.dynamic_scale.numpy() == plain_optimizer.dynamic_scale.numpy()
    assert optimizer.iterations.numpy() == plain_optimizer.iterations.numpy()
    report = doctor.report()
    assert report.status == "healthy"
    assert report.steps_watched == steps


def test_mixed_bfloat16_is_watched_and_unchanged():
    plain_losses, plain_weights, _ = _fit_healthy("mixed_bfloat16", [])
    doctor = gradient_doctor.Doctor(verbose=False)
    losses, weights, _ = _fit_healthy("mixed_bfloat16", [doctor])
    assert losses == plain_losses
    for plain, watched in zip(plain_weights, weights, strict=True):
        np.testing.assert_array_equal(plain, watched)
    assert doctor.report().status == "healthy"


class SoftAttention(keras.layers.Layer):
    """A hand-written softmax over the features, scaled by the features."""

    def call(self, h):
        weights = tf.exp(h)  # in float16 under mixed precision
        return h * weights / tf.reduce_sum(weights, axis=-1, keepdims=True)


def test_float16_exp_overflow_is_localized_with_the_float16_limit():
    keras.mixed_precision.set_global_policy("mixed_float16")
    keras.utils.set_random_seed(0)
    x, y = _regression_data()
    x[100:104] *= 40.0  # outlier rows in the fourth batch of 32
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(8),
            SoftAttention(),
            keras.layers.Dense(1, dtype="float32"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    doctor = gradient_doctor.Doctor(verbose=False)
    model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0, callbacks=[doctor])
    (finding,) = doctor.report().problems
    assert (finding.category, finding.step, finding.phase) == ("forward_overflow", 3, "forward")
    assert finding.origin.op == "Exp"
    assert finding.origin.inputs[0].dtype == "float16"
    limit = f"{dtype_limits('float16').exp_limit:.4g}"
    assert f"float16 exp overflows above {limit}" in finding.explanation
    families = [fix.family for fix in finding.fixes]
    # The float32 island of the exp alone makes `h * weights` mix float16 and float32: its
    # trial cannot even trace the step, and says so; the others are still tried (they were
    # all reported untried), and the max shift, verified, comes first.
    assert families[0] == "stable_softmax" and finding.fixes[0].verified is True
    island = finding.fixes[families.index("float32_island")]
    assert island.verified is None
    assert island.evidence.startswith("not tried: the step, traced with it in place, raised")
    assert "loss_scaling" not in [fix.family for fix in finding.fixes]  # it is already on
    scaling = {n.remedy: n.why for n in finding.not_fixes}["loss_scaling"]
    assert "already on" in scaling and "forward pass" in scaling
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)


def test_a_loss_scale_that_collapses_is_a_finding_of_its_own():
    keras.mixed_precision.set_global_policy("mixed_float16")
    keras.utils.set_random_seed(0)
    x, y = _regression_data(512)
    y *= 1000.0  # unnormalised targets and a summed loss: float16 gradients past 65504
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(1e-6),
        loss=keras.losses.MeanSquaredError(reduction="sum"),
    )
    doctor = gradient_doctor.Doctor(verbose=False)
    model.fit(x, y, batch_size=64, epochs=4, shuffle=False, verbose=0, callbacks=[doctor])
    (finding,) = doctor.report().problems
    # The optimizer halved its scale from 2**15 once per step (normal, let through)
    # until it reached 1 at step 15, where the gradients still overflow.
    assert finding.category == "loss_scale_collapse"
    assert finding.step == 15
    assert "lowered to 1" in finding.explanation
    assert "float16 holds at most 65504" in finding.explanation
    assert "loss_scaling" in [n.remedy for n in finding.not_fixes]
    assert [fix.family for fix in finding.fixes][0] == "float32_island"
    assert float(model.optimizer.dynamic_scale.numpy()) == 1.0
    assert int(model.optimizer.iterations.numpy()) == 0  # nothing overflowing was applied


def test_custom_loop_with_scaled_loss_reports_the_unscaled_loss():
    keras.mixed_precision.set_global_policy("mixed_float16")
    keras.utils.set_random_seed(0)
    x, y = _regression_data(64)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1, dtype="float32")])
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01))

    @tf.function
    def train_step(features, targets):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features) - targets))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step = gradient_doctor.watch(train_step, optimizer=optimizer, verbose=False)
    loss = step(x, y)
    assert step.watcher.guard.read().loss == pytest.approx(float(loss), rel=1e-6)
    assert step.report().status == "healthy"
