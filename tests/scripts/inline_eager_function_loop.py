"""An eager training loop inside a plain Python function (no tf.function around it).

A logistic model with binary cross-entropy written by hand on the sigmoid's output.
The data are separable and the learning rate is high, so the logits grow until the
sigmoid rounds to exactly 1.0 in float32 and log(1 - p) is log(0).

Expected: category=forward_domain op=Log phase=forward step=8 (the tf.math.log line)
"""

import keras
import numpy as np
import tensorflow as tf


def make_batches(rng, count, size):
    x = rng.normal(size=(count * size, 3)).astype("float32") * 4.0
    y = (x[:, :1] + x[:, 1:2] > 0).astype("float32")
    return [(x[i : i + size], y[i : i + size]) for i in range(0, count * size, size)]


def train(model, optimizer, batches, epochs):
    for epoch in range(epochs):
        for x, y in batches:
            with tf.GradientTape() as tape:
                p = tf.sigmoid(model(x))
                loss = -tf.reduce_mean(y * tf.math.log(p) + (1 - y) * tf.math.log(1 - p))
            grads = tape.gradient(loss, model.trainable_weights)
            optimizer.apply_gradients(zip(grads, model.trainable_weights))
            print(f"epoch {epoch} loss {float(loss):.4f}")


def main():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    train(
        model,
        keras.optimizers.SGD(learning_rate=1.0),
        make_batches(np.random.default_rng(3), 4, 32),
        epochs=3,
    )


main()
