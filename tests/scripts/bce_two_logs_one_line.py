"""A hand-written binary cross-entropy with both logarithms on one line, in a custom loop.

The model's sigmoid saturates to exactly 1.0 for a few rows of one batch, so the SECOND
log on the line, `tf.math.log(1.0 - p)`, sees 0 and writes -inf at step 3. The doctor
should name that second call (not the first `tf.math.log(p)`), and its patch should
guard exactly that call.
"""

import numpy as np
import tensorflow as tf

tf.random.set_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
x[48:52] *= 400.0  # batch 3: logits so large that float32's sigmoid is exactly 1.0

w = tf.Variable(tf.fill((4, 1), 0.5))
b = tf.Variable(tf.zeros((1,)))
optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)


@tf.function
def train_step(features, labels):
    with tf.GradientTape() as tape:
        p = tf.sigmoid(tf.matmul(features, w) + b)
        loss = -tf.reduce_mean(
            labels * tf.math.log(p + 1e-7) + (1.0 - labels) * tf.math.log(1.0 - p)
        )
    grads = tape.gradient(loss, [w, b])
    optimizer.apply_gradients(zip(grads, [w, b]))
    return loss


for _epoch in range(3):
    for start in range(0, 64, 16):
        loss = train_step(x[start : start + 16], y[start : start + 16])
print("final loss", float(loss))
