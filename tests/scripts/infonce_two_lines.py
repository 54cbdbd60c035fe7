"""A SimCLR-style contrastive loss written by hand at temperature 0.01, its log on another line.

Cosine similarities over 0.01 reach 100, and `tf.exp` overflows float32 (above 88.72) at
step 0 on the line that sums it; the next line takes the log of that sum. A max-shift
of the exp alone would change the loss (under a log the shift must be added back), so
the expected fix is logsumexp on both lines: `log_denom = tf.reduce_logsumexp(sim,
axis=1)`, and `log_denom` in place of `tf.math.log(denom)`.
"""

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(4)
encoder = tf.keras.Sequential(
    [tf.keras.Input((16,)), tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(8)]
)
optimizer = tf.keras.optimizers.Adam(1e-3)
TEMPERATURE = 0.01
data = np.random.default_rng(4).normal(size=(1024, 16)).astype("float32")


def info_nce(z1, z2):
    z1 = tf.math.l2_normalize(z1, axis=1)
    z2 = tf.math.l2_normalize(z2, axis=1)
    sim = tf.matmul(z1, z2, transpose_b=True) / TEMPERATURE
    pos = tf.linalg.diag_part(sim)
    denom = tf.reduce_sum(tf.exp(sim), axis=1)
    return tf.reduce_mean(-pos + tf.math.log(denom))


@tf.function
def step(batch):
    a = batch + tf.random.normal(tf.shape(batch), stddev=0.1)
    b = batch + tf.random.normal(tf.shape(batch), stddev=0.1)
    with tf.GradientTape() as tape:
        loss = info_nce(encoder(a), encoder(b))
    grads = tape.gradient(loss, encoder.trainable_variables)
    optimizer.apply_gradients(zip(grads, encoder.trainable_variables))
    return loss


for epoch in range(3):
    for i in range(0, 1024, 128):
        loss = step(data[i : i + 128])
    print(epoch, float(loss))
