"""Log-scaled count features made in the tf.data pipeline of a custom training loop (the
dataset a local of `main`); a few records have a count of 0, and the log of 0 is -inf
in the batch.

The doctor should find: bad_input, its origin the Log on the `return tf.math.log(...)`
line of `featurize`, and a patch of that line that holds when rerun.
"""

import numpy as np
import tensorflow as tf

rng = np.random.default_rng(8)
counts = rng.poisson(6.0, size=(3000, 4)).astype("float32")
target = (np.log1p(counts).sum(axis=1, keepdims=True) + rng.normal(0, 0.1, (3000, 1))).astype(
    "float32"
)


def featurize(raw_counts, y):
    return tf.math.log(raw_counts), y


def make_dataset():
    return tf.data.Dataset.from_tensor_slices((counts, target)).map(featurize).batch(50)


regressor = tf.keras.Sequential(
    [tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="tanh"), tf.keras.layers.Dense(1)]
)
opt = tf.keras.optimizers.Adam(1e-2)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(regressor(x) - y))
    grads = tape.gradient(loss, regressor.trainable_variables)
    opt.apply_gradients(zip(grads, regressor.trainable_variables))
    return loss


def main():
    train_data = make_dataset()
    for epoch in range(3):
        for x, y in train_data:
            loss = train_step(x, y)
        print("epoch", epoch, float(loss))


main()
