"""A subclassed Keras model, built lazily by `fit` (no `Input`), whose author put
`tf.debugging.check_numerics` on an intermediate value to find a NaN. Its attention
pooling divides by the sum of its weights, written by hand; a batch of padding rows
(all zero, masked out) sums to 0. Without the doctor, the check raises inside Keras's
compiled loop and the run ends with TensorFlow's error."""

import keras
import numpy as np
import tensorflow as tf


class MaskedPooling(keras.Model):
    def __init__(self):
        super().__init__()
        self.score = keras.layers.Dense(1)
        self.head = keras.layers.Dense(1)

    def call(self, tokens):
        mask = tf.cast(tf.reduce_any(tokens != 0.0, axis=-1, keepdims=True), tokens.dtype)
        weights = tf.exp(self.score(tokens)) * mask
        pooled = tf.reduce_sum(weights * tokens, axis=1) / tf.reduce_sum(weights, axis=1)
        pooled = tf.debugging.check_numerics(pooled, "pooled tokens")
        return self.head(pooled)


keras.utils.set_random_seed(5)
rng = np.random.default_rng(5)
tokens = rng.normal(size=(320, 6, 4)).astype("float32")
labels = rng.normal(size=(320, 1)).astype("float32")
tokens[192:224] = 0.0  # sequences that are padding only
data = tf.data.Dataset.from_tensor_slices((tokens, labels)).batch(32)
model = MaskedPooling()
model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
model.fit(data, epochs=2, verbose=2)
