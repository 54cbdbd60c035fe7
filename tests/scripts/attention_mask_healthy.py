"""A tiny causal self-attention model with a -inf mask: healthy, must not be flagged.

Expected: healthy
"""

import keras
import numpy as np
import tensorflow as tf


class CausalAttention(keras.layers.Layer):
    def build(self, shape):
        self.qkv = keras.layers.Dense(3 * shape[-1])

    def call(self, x):
        q, k, v = tf.split(self.qkv(x), 3, axis=-1)
        scores = tf.matmul(q, k, transpose_b=True)
        length = tf.shape(x)[1]
        future = tf.linalg.band_part(tf.ones([length, length]), 0, -1) - tf.eye(length)
        scores = tf.where(future > 0, tf.fill(tf.shape(scores), float("-inf")), scores)
        return tf.matmul(tf.nn.softmax(scores, axis=-1), v)


keras.utils.set_random_seed(0)
tokens = np.random.randint(0, 20, size=(128, 6))
targets = np.roll(tokens, -1, axis=1)
model = keras.Sequential(
    [keras.Input((6,)), keras.layers.Embedding(20, 8), CausalAttention(), keras.layers.Dense(20)]
)
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(tokens, targets, batch_size=32, epochs=2, verbose=0)
print("trained")
