"""Attention whose padding is masked with -inf before a hand-written exp, in a custom loop.

Padded key positions get a score of -inf (`tf.where(valid, scores, -inf)`), so `tf.exp`
gives them exactly 0; some sequences are entirely padding, so their rows are all -inf
and come out as zeros (the sum has an epsilon). A functional model is trained by a
`tf.function` loop over a `tf.data` pipeline; on raw features Adam at 0.1 drives an
unmasked score past float32's exp limit (88.72) within a few steps.

Expected: category=forward_overflow op=Exp phase=forward (the `tf.exp(tf.where(...))`
line, not the -inf mask); the max-shift keeps a row of only -inf finite (a max of -inf
would make -inf - -inf = NaN), and the patched script trains healthy.
"""

import keras
import numpy as np
import tensorflow as tf

LENGTH, FEATURES = 5, 4


class MaskedAttention(keras.layers.Layer):
    def build(self, shape):
        self.query = keras.layers.Dense(8, use_bias=False)
        self.key = keras.layers.Dense(8, use_bias=False)

    def call(self, x):
        valid = tf.reduce_any(x != 0.0, axis=-1)[:, None, :]  # (B, 1, T) keys present
        scores = tf.matmul(self.query(x), self.key(x), transpose_b=True)
        e = tf.exp(tf.where(valid, scores, float("-inf")))
        weights = e / (tf.reduce_sum(e, axis=-1, keepdims=True) + 1e-9)
        return tf.matmul(weights, x)


keras.utils.set_random_seed(5)
rng = np.random.default_rng(5)
x = 3.0 * rng.normal(size=(48, LENGTH, FEATURES)).astype("float32")
lengths = rng.integers(0, LENGTH + 1, 48)  # length 0: a sequence of padding only
x[np.arange(LENGTH)[None, :] >= lengths[:, None]] = 0.0
y = rng.normal(size=(48, 1)).astype("float32")

inputs = keras.Input((LENGTH, FEATURES))
pooled = keras.layers.GlobalAveragePooling1D()(MaskedAttention()(inputs))
model = keras.Model(inputs, keras.layers.Dense(1)(pooled))
optimizer = keras.optimizers.Adam(0.1)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat(4)


@tf.function
def train_step(features, targets):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(features) - targets))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for features, targets in dataset:
    loss = train_step(features, targets)
print("final loss", float(loss))
