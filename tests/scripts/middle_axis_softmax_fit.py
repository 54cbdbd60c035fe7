"""Attention pooling over the middle axis of a [32, 6, 1] tensor, in a subclassed model.

A subclassed model (built on its first call, no `Input`) scores each of a sequence's 6
steps with a Dense layer (scores of shape [batch, 6, 1]) and pools the steps with a
hand-written softmax over axis 1, trained by `fit`. On raw features (tens of units)
Adam at 0.1 drives the scores past float32's exp limit (88.72) at step 10.

Expected: category=forward_overflow op=Exp phase=forward (the `w = tf.exp(scores)`
line); the max-shift is taken along axis 1, the axis the softmax sums over (a shift
along the last axis, of size 1, would make the attention uniform).
"""

import keras
import numpy as np
import tensorflow as tf

STEPS, FEATURES = 6, 4


class AttentionPooling(keras.Model):
    def __init__(self):
        super().__init__()
        self.score = keras.layers.Dense(1)
        self.head = keras.layers.Dense(1)

    def call(self, h):
        scores = self.score(h)  # (batch, steps, 1)
        w = tf.exp(scores) / tf.reduce_sum(tf.exp(scores), axis=1, keepdims=True)
        return self.head(tf.reduce_sum(w * h, axis=1))


keras.utils.set_random_seed(4)
rng = np.random.default_rng(4)
x = tf.constant(30.0 * rng.normal(size=(32, STEPS, FEATURES)).astype("float32"))
y = tf.constant(x.numpy().max(axis=1)[:, :1])  # wants sharp attention on one step
model = AttentionPooling()
model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
history = model.fit(x, y, batch_size=32, epochs=40, verbose=0)
print("final loss", history.history["loss"][-1])
