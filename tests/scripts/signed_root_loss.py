"""A custom Keras loss takes a fractional power of a signed difference (a forum's
"smoother than MSE" loss): a third of the residuals are negative at step 0, so Pow
writes NaN there.

The doctor should find: forward_domain at step 0, origin Pow at the `tf.pow` line, the
share of negatives named; the root of the magnitude (`magnitude`) first and verified;
the clamp into the domain not verified (it rewrites the loss on a third of the values:
a model trained with it learns to overshoot every target).
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

np.random.seed(0)
tf.random.set_seed(0)
x = np.random.randn(512, 10).astype("float32")
y = (x @ np.random.randn(10, 1)).astype("float32")


def root_loss(y_true, y_pred):
    return tf.reduce_mean(tf.pow(y_true - y_pred, 0.5))


model = keras.Sequential([keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=root_loss)
model.fit(x, y, epochs=2, batch_size=64, verbose=0)
