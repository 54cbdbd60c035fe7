"""Heteroscedastic regression: the net predicts a mean and a variance, the variance by relu.

The Gaussian negative log-likelihood takes `log(var)` and divides by `var`; every unit
the relu shuts off is an exact 0, so the log is -inf at step 0. A guard on the log alone
leaves the division by 0. Expected: forward_domain at the Log on the loss line, and the
verified fix rewrites the line that makes `var` (relu -> softplus + 1e-6), which the
replay saw make the log's input.
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(2)


def gaussian_nll(y, out):
    mean, var = out[:, :1], tf.nn.relu(out[:, 1:])
    return tf.reduce_mean(0.5 * tf.math.log(var) + 0.5 * tf.square(y - mean) / var)


x = np.random.default_rng(2).uniform(-3, 3, size=(512, 1)).astype("float32")
y = (np.sin(x) + 0.1 * np.random.default_rng(3).normal(size=x.shape)).astype("float32")
model = keras.Sequential(
    [keras.Input((1,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(2)]
)
model.compile(optimizer="adam", loss=gaussian_nll)
model.fit(x, y, epochs=5, batch_size=32, verbose=0)
