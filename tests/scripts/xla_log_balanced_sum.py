"""jit_compile=True in a custom loop: a log of a balanced sum that XLA adds up in
another order.

Each record holds 8 inflows and 8 outflows; the model scores log(|net flow| + ...).
Row 70 is a corrupted record whose flows all sit near float32's limit, inflows and
outflows balanced: TensorFlow's own Sum kernel gives 0 there (log: -inf), XLA's
fused kernel overflows to inf (log: inf). Both are non-finite, so the eager replay
names the Log; but a guard of the log's input (`tf.maximum(net, 1e-7)`) only holds
where the sum is 0, not as XLA computes it.

Expected: forward_domain at Log, step 2; the guard's trial, compiled with XLA as the
step was, fails again, so it is not verified.
"""

import numpy as np
import tensorflow as tf

tf.random.set_seed(0)
x = np.random.rand(128, 16).astype("float32")
y = np.random.rand(128, 1).astype("float32")
x[70] = 2e38  # in the third batch of 32
signs = tf.concat([tf.ones([8]), -tf.ones([8])], axis=0)
w = tf.Variable(tf.ones([1, 1]))
optimizer = tf.keras.optimizers.SGD(0.01)


@tf.function(jit_compile=True)
def train_step(features, target):
    with tf.GradientTape() as tape:
        net = tf.abs(tf.reduce_sum(features * signs, axis=-1, keepdims=True))
        score = tf.math.log(net) @ w
        loss = tf.reduce_mean((score - target) ** 2)
    grads = tape.gradient(loss, [w])
    optimizer.apply_gradients(zip(grads, [w]))
    return loss


for epoch in range(2):
    for start in range(0, 128, 32):
        loss = train_step(x[start : start + 32], y[start : start + 32])
    print("epoch", epoch, float(loss))
