"""A keras.io-style VAE with a learning rate of 20: the first update throws `z_log_var` far out.

The `Sampling` layer (no weights of its own, a `SeedGenerator` for its noise) takes
exp(0.5 * z_log_var), which overflows at step 1. The weights that feed it are those of
`z_log_var`: the doctor must name that layer, not the sampling layer.
"""

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

keras.utils.set_random_seed(7)
LATENT = 2


class Sampling(layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        epsilon = keras.random.normal(shape=ops.shape(z_mean), seed=self.seed_generator)
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


enc_in = keras.Input((16,))
h = layers.Dense(32, activation="relu")(enc_in)
z_mean = layers.Dense(LATENT, name="z_mean")(h)
z_log_var = layers.Dense(LATENT, name="z_log_var")(h)
z = Sampling()([z_mean, z_log_var])
encoder = keras.Model(enc_in, [z_mean, z_log_var, z], name="encoder")
dec_in = keras.Input((LATENT,))
decoder = keras.Model(
    dec_in,
    layers.Dense(16, activation="sigmoid")(layers.Dense(32, activation="relu")(dec_in)),
    name="decoder",
)


class VAE(keras.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder

    def train_step(self, data):
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            rec = ops.mean(
                ops.sum(
                    keras.losses.binary_crossentropy(data[..., None], reconstruction[..., None]),
                    axis=1,
                )
            )
            kl = -0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var))
            kl = ops.mean(ops.sum(kl, axis=1))
            loss = rec + kl
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        return {"loss": loss}


x = (np.random.default_rng(0).random((1024, 16)) > 0.5).astype("float32")
vae = VAE(encoder, decoder)
vae.compile(optimizer=keras.optimizers.Adam(learning_rate=20.0))
vae.fit(x, epochs=1, batch_size=64, verbose=0)
print("done")
