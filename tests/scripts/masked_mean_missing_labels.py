"""Sensor regression whose labels went missing for a stretch: a tf.data pipeline marks
them with a mask, and the loss is the masked mean, `sum(err * mask) / sum(mask)`. One
batch lies wholly inside the stretch: its mask sums to 0, and 0 / 0 is NaN.

The doctor should find: forward_domain at RealDiv on the loss line, step 10. The
`divide_no_nan` patch is the fix; inside the run its trial can only repeat that batch
(a custom loop's later batches do not exist yet), on which the patched loss is 0 with
no gradient: that trial cannot tell, and the patched copy rerun from the start does.
"""

import numpy as np
import tensorflow as tf

tf.random.set_seed(3)
rng = np.random.default_rng(3)
features = rng.normal(size=(1200, 6)).astype("float32")
labels = (features[:, :2].sum(axis=1) + 0.1 * rng.normal(size=1200)).astype("float32")
labels[400:440] = np.nan  # the logger was down: batch 10 of 40 rows has no label


def with_mask(x, y):
    valid = tf.math.logical_not(tf.math.is_nan(y))
    return x, tf.where(valid, y, 0.0), tf.cast(valid, tf.float32)


dataset = tf.data.Dataset.from_tensor_slices((features, labels)).map(with_mask).batch(40)
dense = tf.keras.layers.Dense(1)
optimizer = tf.keras.optimizers.Adam(1e-2)


@tf.function
def train_step(x, y, mask):
    with tf.GradientTape() as tape:
        err = tf.square(tf.squeeze(dense(x), -1) - y) * mask
        loss = tf.reduce_sum(err) / tf.reduce_sum(mask)
    grads = tape.gradient(loss, dense.trainable_variables)
    optimizer.apply_gradients(zip(grads, dense.trainable_variables))
    return loss


for epoch in range(2):
    for x, y, mask in dataset:
        loss = train_step(x, y, mask)
    print("epoch", epoch, float(loss))
