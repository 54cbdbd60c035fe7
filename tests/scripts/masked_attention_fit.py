"""Self-attention over padded sequences, its softmax written by hand with a padding mask.

Each sequence is padded with zero rows to a fixed length; a Keras layer scores every
pair of positions with unscaled dot products of learned queries and keys, takes
`tf.exp` of the scores, multiplies by the padding mask, and divides by the masked sum
(`model.fit`). The unscaled features make the scores grow past float32's exp limit
(88.72) within a few steps: inf * 1 / inf is NaN.

Expected: category=forward_overflow op=Exp phase=forward (the `tf.exp(scores) * mask`
line); the max-shift takes the largest score among the unmasked positions only.
"""

import keras
import numpy as np
import tensorflow as tf

LENGTH, FEATURES = 6, 4


class MaskedSelfAttention(keras.layers.Layer):
    def build(self, shape):
        self.query = keras.layers.Dense(8, use_bias=False)
        self.key = keras.layers.Dense(8, use_bias=False)

    def call(self, x):
        mask = tf.cast(tf.reduce_any(x != 0.0, axis=-1), x.dtype)[:, None, :]  # (B, 1, T)
        scores = tf.matmul(self.query(x), self.key(x), transpose_b=True)  # (B, T, T)
        e = tf.exp(scores) * mask
        weights = e / (tf.reduce_sum(e, axis=-1, keepdims=True) + 1e-9)
        return tf.matmul(weights, x)


keras.utils.set_random_seed(2)
rng = np.random.default_rng(2)
x = 3.0 * rng.normal(size=(64, LENGTH, FEATURES)).astype("float32")
lengths = rng.integers(2, LENGTH + 1, 64)
x[np.arange(LENGTH)[None, :] >= lengths[:, None]] = 0.0  # padding
y = rng.normal(size=(64, 1)).astype("float32")
model = keras.Sequential(
    [
        keras.Input((LENGTH, FEATURES)),
        MaskedSelfAttention(),
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
model.fit(x, y, batch_size=16, epochs=5, verbose=0)
print("trained")
