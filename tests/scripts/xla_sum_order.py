"""jit_compile=True: a signed sum that overflows only in the order XLA adds it up.

Row 70 is a corrupted record whose 16 flows all sit near float32's limit, inflows and
outflows balanced. TensorFlow's own Sum kernel adds the row in SIMD lanes (each
inflow meets its outflow first: 0); XLA's fused kernel adds it left to right and
overflows after two terms. The eager replay therefore stays finite.

Expected: step 2, the explanation says the value did not reproduce without XLA;
first fix disable_xla.
"""

import keras
import numpy as np
import tensorflow as tf


class NetFlow(keras.layers.Layer):
    """Inflows (the first 8 features) minus outflows (the last 8)."""

    def call(self, x):
        signs = tf.concat([tf.ones([8]), -tf.ones([8])], axis=0)
        return tf.reduce_sum(x * signs, axis=-1, keepdims=True)


keras.utils.set_random_seed(0)
x = np.random.rand(128, 16).astype("float32")
y = x[:, :8].sum(axis=1, keepdims=True) - x[:, 8:].sum(axis=1, keepdims=True)
x[70] = 2e38  # in the third batch of 32
model = keras.Sequential([keras.Input((16,)), NetFlow(), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse", jit_compile=True)
model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
