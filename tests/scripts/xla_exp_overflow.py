"""jit_compile=True: a hand-written softmax whose exp overflows on an outlier batch.

The overflow happens the same way with or without XLA, so the eager replay names it.

Expected: category=forward_overflow, origin Exp on the `tf.exp(scores)` line, step 3
"""

import keras
import numpy as np
import tensorflow as tf


class Attention(keras.layers.Layer):
    def call(self, scores):
        weights = tf.exp(scores)
        return weights / tf.reduce_sum(weights, axis=-1, keepdims=True)


keras.utils.set_random_seed(0)
x = np.random.randn(128, 6).astype("float32")
y = np.eye(6, dtype="float32")[np.argmax(x, axis=1)]
x[100] *= 1e3  # in the fourth batch of 32
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(6), Attention()])
model.compile(optimizer="adam", loss="categorical_crossentropy", jit_compile=True)
model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
