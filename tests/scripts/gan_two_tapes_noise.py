"""A 1-D GAN of a two-mode mixture: two tapes in one `tf.function` step, the noise drawn inside.

The discriminator's loss is written out with `log(1 - d_fake)`; near step 77 the
discriminator scores one fake d_fake == 1.0 in float32 and the log is -inf. The
doctor should name the Log on the d_loss line, replay the step with the noise it drew
(a fresh draw stays finite), and verify the guarded log: each trial meets the failing
draw at the failing batch, and both players' losses are judged apart (the
discriminator's, then the generator's, matched to their tapes).
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.utils.set_random_seed(0)
np.random.seed(0)

LATENT = 4
BATCH = 64

generator = keras.Sequential(
    [
        keras.layers.Dense(32, activation="relu", input_shape=(LATENT,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1),
    ],
    name="generator",
)
discriminator = keras.Sequential(
    [
        keras.layers.Dense(32, activation="relu", input_shape=(1,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1, activation="sigmoid"),
    ],
    name="discriminator",
)
g_opt = keras.optimizers.Adam(2e-3, beta_1=0.5)
d_opt = keras.optimizers.Adam(3e-2, beta_1=0.5)  # a faster discriminator


def real_samples(n):
    mode = np.random.rand(n, 1) < 0.5
    near, far = np.random.normal(-30, 5, (n, 1)), np.random.normal(30, 5, (n, 1))
    return np.where(mode, near, far).astype("float32")


@tf.function
def train_step(real):
    z = tf.random.normal((BATCH, LATENT))
    with tf.GradientTape() as d_tape, tf.GradientTape() as g_tape:
        fake = generator(z, training=True)
        d_real = discriminator(real, training=True)
        d_fake = discriminator(fake, training=True)
        d_loss = -tf.reduce_mean(tf.math.log(d_real) + tf.math.log(1.0 - d_fake))
        g_loss = -tf.reduce_mean(tf.math.log(d_fake))
    d_grads = d_tape.gradient(d_loss, discriminator.trainable_variables)
    g_grads = g_tape.gradient(g_loss, generator.trainable_variables)
    d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
    g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
    return d_loss, g_loss


for step in range(300):
    d_loss, g_loss = train_step(real_samples(BATCH))
    if step % 100 == 0:
        print(f"step {step}: d_loss={d_loss.numpy():.4f} g_loss={g_loss.numpy():.4f}")
