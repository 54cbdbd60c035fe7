"""A trainer class with a compiled step method, in the style of many research repos: the
author guards the loss with `tf.debugging.check_numerics` inside the `tf.function`. The
Poisson rate head is a plain Dense whose output goes through `tf.math.log` as if it were
a rate already: once a batch of larger counts pushes a rate below zero, the log is NaN,
the check raises inside the compiled step, and the run ends with TensorFlow's error."""

import numpy as np
import tensorflow as tf


class CountTrainer:
    def __init__(self, learning_rate=0.05):
        self.model = tf.keras.Sequential(
            [
                tf.keras.Input((5,)),
                tf.keras.layers.Dense(8, activation="tanh"),
                tf.keras.layers.Dense(1),
            ]
        )
        self.optimizer = tf.keras.optimizers.SGD(learning_rate)

    @tf.function
    def train_step(self, features, counts):
        with tf.GradientTape() as tape:
            rate = self.model(features) + 2.0
            log_likelihood = counts * tf.math.log(rate) - rate
            loss = -tf.reduce_mean(log_likelihood)
            loss = tf.debugging.check_numerics(loss, "poisson loss")
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss

    def fit(self, dataset, epochs):
        for epoch in range(epochs):
            for step, (features, counts) in enumerate(dataset):
                loss = self.train_step(features, counts)
                print(f"epoch {epoch} step {step} loss {float(loss):.4f}")


if __name__ == "__main__":
    tf.keras.utils.set_random_seed(2)
    rng = np.random.default_rng(2)
    features = rng.normal(size=(256, 5)).astype("float32")
    counts = rng.poisson(1.0, size=(256, 1)).astype("float32")
    features[160:192] *= 6.0  # a batch far outside the rest
    data = tf.data.Dataset.from_tensor_slices((features, counts)).batch(32)
    CountTrainer().fit(data, epochs=3)
