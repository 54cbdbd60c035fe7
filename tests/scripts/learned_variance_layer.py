"""A regression with a learned output noise: a subclassed Keras model
whose Gaussian likelihood divides by sqrt of a trained scalar `variance` (no constraint).
A high learning rate pushes the variance below zero: sqrt -> NaN."""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(4)
rng = np.random.default_rng(4)
x = rng.normal(size=(1024, 6)).astype("float32")
y = (x @ rng.normal(size=(6, 1)) + 0.1 * rng.normal(size=(1024, 1))).astype("float32")


class NoisyRegressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.body = keras.layers.Dense(16, activation="tanh")
        self.head = keras.layers.Dense(1)
        self.variance = self.add_weight(shape=(), initializer="ones", name="variance")

    def call(self, inputs):
        return self.head(self.body(inputs))


model = NoisyRegressor()


def gaussian_nll(y_true, y_pred):
    sigma = tf.sqrt(model.variance)
    return tf.reduce_mean(tf.math.log(sigma) + 0.5 * tf.square((y_true - y_pred) / sigma))


model.compile(optimizer=keras.optimizers.SGD(0.2, momentum=0.9), loss=gaussian_nll)
model.fit(x, y, batch_size=64, epochs=5, verbose=2)
