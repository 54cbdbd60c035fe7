"""A GAN whose discriminator and generator each have their own `tf.function` step, called
in turn by the loop (`d_step(real)`, then `g_step(64)`), with a softplus written by hand,
log(1 + exp(t)). The critic's fast optimizer drives its logits past exp's range at its
second step. A trial of `d_step` must not be fed `g_step`'s argument."""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(5)
rng = np.random.default_rng(5)
real = (rng.normal(size=(2048, 2)) * 0.2 + np.array([40.0, 40.0])).astype("float32")
generator = keras.Sequential([keras.layers.Dense(32, activation="relu"), keras.layers.Dense(2)])
critic = keras.Sequential(
    [
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1),
    ]
)
g_opt = keras.optimizers.Adam(1e-3)
d_opt = keras.optimizers.Adam(1e-1)


def softplus(t):
    return tf.math.log(1.0 + tf.exp(t))


@tf.function
def d_step(batch):
    noise = tf.random.normal((tf.shape(batch)[0], 4))
    with tf.GradientTape() as tape:
        fake = generator(noise)
        loss = tf.reduce_mean(softplus(-critic(batch))) + tf.reduce_mean(softplus(critic(fake)))
    grads = tape.gradient(loss, critic.trainable_variables)
    d_opt.apply_gradients(zip(grads, critic.trainable_variables))
    return loss


@tf.function
def g_step(count):
    noise = tf.random.normal((count, 4))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(softplus(-critic(generator(noise))))
    grads = tape.gradient(loss, generator.trainable_variables)
    g_opt.apply_gradients(zip(grads, generator.trainable_variables))
    return loss


for step in range(100):
    start = (step * 64) % len(real)
    d_loss = d_step(real[start : start + 64])
    g_loss = g_step(64)
    if step % 25 == 0:
        print(step, float(d_loss), float(g_loss))
