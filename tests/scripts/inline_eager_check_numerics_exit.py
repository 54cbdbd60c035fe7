"""A research-style eager loop in a function: the loss is checked with
`tf.debugging.check_numerics` before the gradient is taken, as people add it to find a
NaN, and it raises. The loss weighs each row by the inverse spread of its features, and
a batch of constant rows (a sensor stuck at one value) has spread 0."""

import numpy as np
import tensorflow as tf


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(320, 6)).astype("float32")
    targets = (features @ rng.normal(size=(6, 1))).astype("float32")
    features[224:256] = 0.5  # the stuck sensor: every feature of these rows the same
    return tf.data.Dataset.from_tensor_slices((features, targets)).batch(32)


def train(epochs=3):
    tf.random.set_seed(1)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((6,)),
            tf.keras.layers.Dense(12, activation="tanh"),
            tf.keras.layers.Dense(1),
        ]
    )
    optimizer = tf.keras.optimizers.SGD(0.05)
    data = make_data()
    for epoch in range(epochs):
        for batch, (x, y) in enumerate(data):
            with tf.GradientTape() as tape:
                prediction = model(x, training=True)
                spread = tf.math.reduce_std(x, axis=1, keepdims=True)
                loss = tf.reduce_mean(tf.square(prediction - y) / spread)
            tf.debugging.check_numerics(loss, "weighted loss")
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            print(f"epoch {epoch} batch {batch} loss {float(loss):.4f}")


if __name__ == "__main__":
    train()
