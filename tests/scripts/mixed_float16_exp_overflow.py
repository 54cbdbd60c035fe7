"""mixed_float16: a hand-written softmax's exp overflows float16 on an outlier batch.

float16 exp overflows above 11.09 (float32's limit is 88.72); the loss turns NaN.

Expected: category=forward_overflow, origin Exp (float16) on the `tf.exp(h)` line, step 3,
first fix float32_island, loss_scaling among the not-fixes
"""

import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")


class SoftAttention(keras.layers.Layer):
    def call(self, h):
        weights = tf.exp(h)
        return h * weights / tf.reduce_sum(weights, axis=-1, keepdims=True)


keras.utils.set_random_seed(0)
x = np.random.randn(256, 8).astype("float32")
y = x.sum(axis=1, keepdims=True)
x[100:104] *= 40.0  # outlier rows in the fourth batch of 32
model = keras.Sequential(
    [
        keras.Input((8,)),
        keras.layers.Dense(8),
        SoftAttention(),
        keras.layers.Dense(1, dtype="float32"),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
