"""A VAE whose log-variance runs away at its very first step, every value finite.

The spectra are raw counts (0 to 80), so the encoder's unbounded log-variance head
starts in the tens: `exp(0.5 * log_var)` scales the sampling noise past 1e12, the decoder
rebuilds that, and the first step's gradients, each finite, have a global norm whose
square overflows float32 (Adam would write NaN). The KL term takes `exp(log_var)` too.
"""

import keras
import numpy as np
import tensorflow as tf
from keras import layers

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
prototypes = rng.random((4, 256)).astype("float32")
spectra = (prototypes[rng.integers(0, 4, 256)] * 80.0).astype("float32")

encoder_input = keras.Input(shape=(256,))
hidden = layers.Dense(64, activation="relu")(encoder_input)
z_mean = layers.Dense(4, name="z_mean")(hidden)
z_log_var = layers.Dense(4, name="z_log_var")(hidden)
encoder = keras.Model(encoder_input, [z_mean, z_log_var])
decoder = keras.Sequential(
    [keras.Input((4,)), layers.Dense(64, activation="relu"), layers.Dense(256)]
)
optimizer = keras.optimizers.Adam(1e-3)


@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        mu, log_var = encoder(x, training=True)
        z = mu + tf.exp(0.5 * log_var) * tf.random.normal(tf.shape(mu))
        rebuilt = decoder(z, training=True)
        recon = tf.reduce_mean(tf.reduce_sum(tf.square(x - rebuilt), axis=1))
        kl = -0.5 * tf.reduce_mean(
            tf.reduce_sum(1 + log_var - tf.square(mu) - tf.exp(log_var), axis=1)
        )
        loss = recon + kl
    weights = encoder.trainable_variables + decoder.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
    return loss


for batch in tf.data.Dataset.from_tensor_slices(spectra).batch(32).repeat(2):
    loss = train_step(batch)
print("last loss", float(loss))
