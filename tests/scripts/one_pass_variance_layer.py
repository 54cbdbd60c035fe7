"""A hand-written layer normalisation whose variance is computed in one pass,
E[x^2] - E[x]^2, on raw barometer windows (~1013 hPa, fluctuations of 0.004): in float32
both terms are ~1e6 and their difference is rounding, negative for a third of the rows,
and the root of it is NaN at step 0. Expected: forward_domain at the Sqrt, the input
named as a one-pass variance, and the variance computed by `tf.math.reduce_variance`
on the subtraction's line as a verified fix."""

import keras
import numpy as np
import tensorflow as tf
from keras import layers


class FastLayerNorm(layers.Layer):
    def call(self, x):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        mean_sq = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
        var = mean_sq - tf.square(mean)
        return (x - mean) / tf.sqrt(var + 1e-6)


keras.utils.set_random_seed(61)
rng = np.random.default_rng(61)
n, steps = 1024, 32
drift = rng.integers(0, 2, n)
slope = np.where(drift, 0.01, 0.0)[:, None] * np.arange(steps)[None, :]
x = (rng.normal(1013.25, 5.0, (n, 1)) + slope + rng.normal(0, 0.004, (n, steps))).astype("float32")
y = drift.astype("float32")

model = keras.Sequential(
    [
        keras.Input((steps,)),
        FastLayerNorm(),
        layers.Dense(16, activation="relu"),
        layers.Dense(1, activation="sigmoid"),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
model.fit(x, y, batch_size=64, epochs=2, verbose=0)
