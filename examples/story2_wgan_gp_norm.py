"""Conditional WGAN-GP on tabular "credit card" data whose critic gradients turn NaN.

Story 2 of gradient-doctor: a conditional WGAN-GP in the style of the Keras website
example (a `keras.Model` subclass with its own `train_step`: three critic steps and
one generator step, each with its own `tf.GradientTape`), trained with `model.fit`
to generate fraud transactions. The critic ends in a 2-unit tanh and its loss pushes
its scores towards -1 and +1; the unscaled "Amount" column lets it get there with
small weights. After a few hundred steps both tanh units saturate for some
interpolated row: tanh rounds to exactly +-1.0 in float32, so the critic's gradient
with respect to that row is exactly the zero vector. The penalty itself stays finite
(norm 0 gives (0 - 1)^2 = 1), but the gradient of `tf.norm` at a zero vector is
x / ||x|| = 0 / 0: in the backward pass the gradient of its Sqrt is -inf (step 362,
second critic step), then NaN, and every critic weight, then every generator
weight, becomes NaN. Removing the penalty "fixes" it, which hides the real cause.

Expected: category=backward_singularity op=SqrtGrad phase=backward line=100
"""

import keras
import numpy as np
import tensorflow as tf

NUM_ROWS = 8192
X_DIM = 30
LATENT_DIM = 16
BATCH_SIZE = 64
EPOCHS = 6


def make_transactions(rng):
    """30 anonymised features (like V1..V28, Time, Amount) and a fraud label."""
    is_fraud = rng.uniform(size=NUM_ROWS) < 0.1
    x = rng.normal(size=(NUM_ROWS, X_DIM))
    x[is_fraud, :5] += 2.0  # fraud rows differ in a few features...
    # ...and in the amount, left unscaled: typically ~3 for normal rows, ~12 for fraud.
    x[:, -1] = rng.lognormal(mean=np.where(is_fraud, 2.5, 1.0), sigma=0.5)
    return x.astype("float32"), is_fraud.astype("float32")


def build_critic():
    return keras.Sequential(
        [
            keras.layers.Input(shape=(X_DIM,), name="c-input"),
            keras.layers.Dense(64, kernel_initializer="he_normal", name="c-hidden-1"),
            keras.layers.LeakyReLU(negative_slope=0.25, name="c-activation-1"),
            keras.layers.Dense(32, kernel_initializer="he_normal", name="c-hidden-2"),
            keras.layers.LeakyReLU(negative_slope=0.25, name="c-activation-2"),
            keras.layers.Dense(2, activation="tanh", name="c-output"),
        ],
        name="critic",
    )


def build_generator():
    return keras.Sequential(
        [
            keras.layers.Input(shape=(LATENT_DIM + 1,), name="g-input"),
            keras.layers.Dense(64, activation="relu", name="g-hidden-1"),
            keras.layers.Dense(64, activation="relu", name="g-hidden-2"),
            keras.layers.Dense(X_DIM, name="g-output"),
        ],
        name="generator",
    )


class WGANGP(keras.Model):
    def __init__(self, critic, generator, critic_steps=3, gp_coeff=10.0):
        super().__init__()
        self.critic = critic
        self.generator = generator
        self.critic_steps = critic_steps
        self.gp_coeff = gp_coeff
        # Keras random ops with a seed generator: reproducible runs.
        self.seed_generator = keras.random.SeedGenerator(2)

    def compile(self, c_optimizer, g_optimizer):
        super().compile()
        self.c_optimizer = c_optimizer
        self.g_optimizer = g_optimizer

    def generate_fraud(self, batch_size):
        z = keras.random.normal((batch_size, LATENT_DIM), seed=self.seed_generator)
        # Condition on the class label (1 = fraud).
        z_conditioned = tf.concat([z, tf.ones((batch_size, 1))], axis=1)
        return self.generator(z_conditioned, training=True)

    def critic_scores(self, x):
        """Critic output mapped from tanh's [-1, 1] to [0, 1]."""
        return 0.5 * (self.critic(x, training=True) + 1.0)

    def gradient_penalty(self, batch_size, x_real, x_fake):
        # Random linear interpolation between real and fake rows (x hat).
        alpha = keras.random.uniform((batch_size, 1), 0.0, 1.0, seed=self.seed_generator)
        x_interpolated = x_real + alpha * (x_fake - x_real)
        with tf.GradientTape() as gp_tape:
            gp_tape.watch(x_interpolated)
            scores = self.critic_scores(x_interpolated)
        grads = gp_tape.gradient(scores, x_interpolated)
        # The penalty keeps the gradient norm close to 1 (1-Lipschitz critic).
        norm = tf.norm(grads, axis=-1)
        return tf.reduce_mean(tf.square(norm - 1.0))

    def critic_step(self, x_real, y_real):
        batch_size = tf.shape(x_real)[0]
        x_fake = self.generate_fraud(batch_size)
        with tf.GradientTape() as c_tape:
            output_fake = self.critic_scores(x_fake)
            score_fake = tf.reduce_mean(tf.reduce_sum(output_fake, axis=1))
            output_real = self.critic_scores(x_real)
            score_real = tf.reduce_mean(
                (1.0 - 2.0 * y_real) * (output_real[:, 0] - output_real[:, 1])
            )
            gp = self.gp_coeff * self.gradient_penalty(batch_size, x_real, x_fake)
            # +1.0 so the ideal loss is zero.
            c_loss = 1.0 + score_fake - score_real + gp
        c_grads = c_tape.gradient(c_loss, self.critic.trainable_weights)
        self.c_optimizer.apply_gradients(zip(c_grads, self.critic.trainable_weights))
        return c_loss, gp

    def generator_step(self, batch_size):
        with tf.GradientTape() as g_tape:
            output_fake = self.critic_scores(self.generate_fraud(batch_size))
            # The generator wants its rows scored like real fraud.
            g_loss = tf.reduce_mean(output_fake[:, 0] - output_fake[:, 1])
        g_grads = g_tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(g_grads, self.generator.trainable_weights))
        return g_loss

    def train_step(self, data):
        x_real, y_real = data
        for _ in range(self.critic_steps):
            c_loss, gp = self.critic_step(x_real, y_real)
        g_loss = self.generator_step(tf.shape(x_real)[0])
        return {"c_loss": c_loss, "gp": gp, "g_loss": g_loss}


class StopOnNaN(keras.callbacks.Callback):
    """Stops at the first NaN or inf loss (TerminateOnNaN only looks at "loss")."""

    def on_train_batch_end(self, batch, logs=None):
        if not all(np.isfinite(value) for value in logs.values()):
            print(f"batch {batch}: non-finite loss, stopping")
            self.model.stop_training = True


def main():
    keras.utils.set_random_seed(2)
    x, y = make_transactions(np.random.default_rng(2))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(NUM_ROWS, seed=2)
    dataset = dataset.batch(BATCH_SIZE, drop_remainder=True)
    gan = WGANGP(build_critic(), build_generator())
    gan.compile(
        c_optimizer=keras.optimizers.Adam(1e-3, beta_1=0.5, beta_2=0.9),
        g_optimizer=keras.optimizers.Adam(1e-3, beta_1=0.5, beta_2=0.9),
    )
    history = gan.fit(dataset, epochs=EPOCHS, verbose=2, callbacks=[StopOnNaN()])
    print("final critic loss:", history.history["c_loss"][-1])


if __name__ == "__main__":
    main()
