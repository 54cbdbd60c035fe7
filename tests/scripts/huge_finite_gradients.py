"""Finite gradients whose norm overflows float32: Adam would write NaN into the weights.

A custom loop (tf.function) scales the loss by 1e21 from step 3 on: every gradient stays
finite (about 1e21), but their squares overflow float32, so Adam's second moment would
turn inf and the update NaN. The script prints whether the weights stayed finite.
"""

import keras
import numpy as np
import tensorflow as tf


def main() -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam(1e-3)
    x = tf.constant(np.random.default_rng(0).normal(size=(16, 4)), tf.float32)
    y = tf.ones((16, 1))

    @tf.function
    def train_step(x, y, scale):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y)) * scale
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(6):
        train_step(x, y, tf.constant(1e21 if step >= 3 else 1.0))
    finite = all(np.isfinite(v.numpy()).all() for v in model.trainable_variables)
    print("weights finite:", finite)


if __name__ == "__main__":
    main()
