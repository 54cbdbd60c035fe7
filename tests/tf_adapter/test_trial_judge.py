"""The fix-trial judge on real tiny models: clipped updates, several objectives, step 0."""

import keras
import numpy as np
import tensorflow as tf

from gradient_doctor import Doctor

TRIAL_STEPS = 30


def _scaled_mse(y_true, y_pred):
    return 1e21 * tf.reduce_mean(tf.square(y_true - y_pred))  # squares of 1e21 overflow


def _fit_scaled(optimizer, trial_steps=TRIAL_STEPS, scale_input=1.0):
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32") * scale_input
    y = np.ones((64, 1), "float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    model.compile(optimizer=optimizer, loss=_scaled_mse)
    doctor = Doctor(verbose=False, trial_steps=trial_steps)
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[doctor])
    return model, doctor.report()


def test_value_clipping_of_huge_finite_gradients_is_judged_as_keras_applies_it():
    model, report = _fit_scaled(keras.optimizers.Adam(1e-3, clipvalue=1.0), trial_steps=0)
    assert report.problems == ()  # the clipped update is finite: nothing to skip
    assert all(np.isfinite(v.numpy()).all() for v in model.trainable_variables)


class _RootGate(keras.layers.Layer):
    """x * sqrt(w), w starting at 0: the gradient of w is inf (finite upstream / 0)."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(), initializer="zeros")

    def call(self, x):
        return x * tf.sqrt(self.w) + x


def test_value_clipping_does_not_hide_an_infinite_gradient():
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), _RootGate(), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(1e-2, clipvalue=1.0), loss="mse")
    doctor = Doctor(verbose=False, trial_steps=0)
    model.fit(
        x, np.ones((32, 1), "float32"), batch_size=32, epochs=1, verbose=0, callbacks=[doctor]
    )
    # Keras would clip the inf to 1.0 and train on; the doctor still stops the update.
    problems = doctor.report().problems
    assert problems and problems[0].step == 0 and problems[0].phase == "backward"
    assert float(model.layers[0].w.numpy()) == 0.0  # the update was skipped


def test_global_norm_clipping_of_an_overflowing_norm_still_fails():
    _, report = _fit_scaled(keras.optimizers.Adam(1e-3, global_clipnorm=1.0), trial_steps=0)
    # Keras's clip_by_global_norm turns every gradient NaN when the norm overflows.
    assert report.problems and report.problems[0].step == 0


def test_clipping_does_not_hide_a_forward_overflow():
    _, report = _fit_scaled(keras.optimizers.Adam(clipvalue=1.0), trial_steps=0, scale_input=1e19)
    assert report.problems and report.problems[0].category == "forward_overflow"


def test_the_clipvalue_trial_holds_and_its_patch_writes_what_was_trialed():
    # A learning rate no other test file writes: the callback finds the optimizer's line
    # in the loaded sources, and two agreeing calls would leave it unnamed.
    _, report = _fit_scaled(keras.optimizers.Adam(3e-3))
    problem = report.problems[0]
    assert (problem.category, problem.step) == ("exploding_gradients", 0)
    fix = next(f for f in problem.fixes if f.family == "clip_by_value")
    assert fix.verified is True, fix.evidence
    assert "with clipvalue=1 " in fix.evidence and "the loss fell" in fix.evidence
    (added,) = [line for line in fix.patch.splitlines() if line.startswith("+ ")]
    assert "keras.optimizers.Adam(3e-3, clipvalue=1.0)" in added


def _negative_log_likelihood(y_true, y_pred):
    return -tf.reduce_mean(tf.math.log(y_pred))  # every prediction is below zero


def test_a_guard_that_zeroes_every_gradient_is_not_verified_at_step_0():
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(1).uniform(size=(64, 3)).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(
                1, kernel_initializer="zeros", bias_initializer=keras.initializers.Constant(-5.0)
            ),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=_negative_log_likelihood)
    doctor = Doctor(verbose=False, trial_steps=TRIAL_STEPS)
    model.fit(x, x[:, :1], batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[doctor])
    problem = doctor.report().problems[0]
    assert (problem.category, problem.step) == ("forward_domain", 0)
    tried = [f for f in problem.fixes if f.patch and f.evidence and "all " in f.evidence]
    assert tried, [f.evidence for f in problem.fixes]
    for fix in tried:  # log(max(p, eps)) of p < 0 everywhere: a constant, no gradient
        assert fix.verified is False, fix.evidence
        assert f"exactly zero at {TRIAL_STEPS} of its {TRIAL_STEPS} steps" in fix.evidence


LATENT = 8


class _GAN(keras.Model):
    """Two optimizers; the discriminator's sigmoid saturates to 0 on a real sample."""

    def __init__(self):
        super().__init__()
        self.generator = keras.Sequential(
            [
                keras.Input((LATENT,)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(4),
            ]
        )
        self.discriminator = keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(1, activation="sigmoid"),
            ]
        )

    def compile(self, d_optimizer, g_optimizer):
        super().compile()
        self.d_optimizer, self.g_optimizer = d_optimizer, g_optimizer

    def train_step(self, real):
        noise = tf.random.normal((tf.shape(real)[0], LATENT))
        with tf.GradientTape() as tape:
            p_real = self.discriminator(real)
            p_fake = self.discriminator(self.generator(noise))
            d_loss = -tf.reduce_mean(tf.math.log(p_real) + tf.math.log(1.0 - p_fake))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        with tf.GradientTape() as tape:
            p_fake = self.discriminator(self.generator(noise))
            g_loss = -tf.reduce_mean(tf.math.log(p_fake))
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        return {"d_loss": d_loss, "g_loss": g_loss}


def test_a_gan_fix_is_judged_over_both_objectives():
    keras.utils.set_random_seed(1)
    real = (np.random.default_rng(0).normal(size=(2048, 4)) * 3 + 20).astype("float32")
    gan = _GAN()
    gan.compile(keras.optimizers.Adam(0.05), keras.optimizers.Adam(0.05))
    doctor = Doctor(verbose=False, trial_steps=10)
    gan.fit(real, batch_size=64, epochs=3, verbose=0, callbacks=[doctor])
    problem = doctor.report().problems[0]
    assert problem.category == "forward_domain"
    tried = [
        f for f in problem.fixes if f.evidence and "the losses of its 2 objectives" in f.evidence
    ]
    assert tried, [f.evidence for f in problem.fixes]
    for fix in tried:  # the generator's loss alone is not compared with the loss before
        assert "it had before the trouble began" not in fix.evidence
        if fix.verified:
            assert "judged over its 2 objectives: each one's loss finite" in fix.evidence
        else:
            assert "loss (of 2, in the order of the step's updates) diverged" in fix.evidence
