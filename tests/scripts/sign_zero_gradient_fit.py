"""A layer that binarises activations with tf.sign: the layers before it never learn.

tf.sign's gradient is defined (zeros), so Keras gives no warning; every gradient of the
first Dense layer is exactly zero on every step.

Expected: category=disconnected_gradients, 2 variables (sequential/dense), not all
"""

import keras
import numpy as np
import tensorflow as tf


class Binarize(keras.layers.Layer):
    def call(self, x):
        return tf.sign(x)


keras.utils.set_random_seed(0)
model = keras.Sequential(
    [keras.Input((4,)), keras.layers.Dense(8), Binarize(), keras.layers.Dense(1)]
)
model.compile(optimizer="adam", loss="mse")
model.fit(np.random.randn(512, 4), np.random.randn(512, 1), batch_size=8, epochs=2, verbose=0)
print("done")
