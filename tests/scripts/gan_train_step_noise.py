"""A Keras-style GAN: `train_step` overridden with two optimizers, noise from `tf.random.normal`.

The hand-written binary cross-entropy takes `log(p_real)`; the discriminator soon
saturates its sigmoid to exactly 0 on a real sample (step 39) and the loss is -inf.
The failing step drew its noise from a stateful kernel: the replay must draw the same.
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(1)
LATENT = 8


class GAN(keras.Model):
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
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer

    def train_step(self, real):
        batch = tf.shape(real)[0]
        noise = tf.random.normal((batch, LATENT))
        with tf.GradientTape() as tape:
            fake = self.generator(noise)
            p_real = self.discriminator(real)
            p_fake = self.discriminator(fake)
            d_loss = -tf.reduce_mean(tf.math.log(p_real) + tf.math.log(1.0 - p_fake))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        with tf.GradientTape() as tape:
            p_fake = self.discriminator(self.generator(tf.random.normal((batch, LATENT))))
            g_loss = -tf.reduce_mean(tf.math.log(p_fake))
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        return {"d_loss": d_loss, "g_loss": g_loss}


real = (np.random.default_rng(0).normal(size=(2048, 4)) * 3 + 20).astype("float32")
gan = GAN()
gan.compile(keras.optimizers.Adam(0.05), keras.optimizers.Adam(0.05))
gan.fit(real, batch_size=64, epochs=3, verbose=0)
