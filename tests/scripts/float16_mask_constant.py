"""Mixed precision attention with an additive mask of -1e9, a constant float16 cannot hold.

-1e9 becomes -inf when converted to float16 (largest 65504), so `(1 - mask) * -1e9`
is `0 * -inf` = NaN for every kept position at step 0. No op of the step makes the
-inf: the doctor must name the Mul that reads it and the literal on the line.
"""

import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)


class MaskedSelfAttention(keras.layers.Layer):
    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        self.q = keras.layers.Dense(dim)
        self.k = keras.layers.Dense(dim)
        self.v = keras.layers.Dense(dim)

    def call(self, x, mask):
        scores = tf.matmul(self.q(x), self.k(x), transpose_b=True) / 4.0
        mask = tf.cast(mask[:, None, :], scores.dtype)
        scores = scores + (1.0 - mask) * -1e9
        weights = tf.nn.softmax(scores, axis=-1)
        return tf.matmul(weights, self.v(x))


tokens = keras.Input((12, 16))
mask_in = keras.Input((12,))
h = MaskedSelfAttention(16)(tokens, mask_in)
out = keras.layers.Dense(1, dtype="float32")(keras.layers.GlobalAveragePooling1D()(h))
model = keras.Model([tokens, mask_in], out)
model.compile(optimizer="adam", loss="mse")
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 12, 16)).astype("float32")
m = (rng.random((256, 12)) > 0.2).astype("float32")
y = rng.normal(size=(256, 1)).astype("float32")
model.fit([x, m], y, batch_size=32, epochs=1, verbose=0)
print("done")
