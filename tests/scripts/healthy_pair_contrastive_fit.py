"""A siamese embedding trained with model.fit through its own train_step (keras.io's
'customizing fit' style): one embedding network on both items of a pair, and the
contrastive loss on their squared distance. The embedding's last bias is added to both
items and cancels in their difference, so its gradient is exactly zero on every step:
by construction, not a broken path. Healthy."""

import numpy as np
import tensorflow as tf
from tensorflow import keras

rng = np.random.default_rng(11)
centers = rng.normal(size=(8, 12)) * 2.0


def pairs(n):
    cls = rng.integers(0, 8, size=n)
    same = rng.random(n) < 0.5
    partner = np.where(same, cls, (cls + rng.integers(1, 8, size=n)) % 8)
    left = centers[cls] + rng.normal(size=(n, 12))
    right = centers[partner] + rng.normal(size=(n, 12))
    return left.astype("float32"), right.astype("float32"), same.astype("float32")


class PairModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.embed = keras.Sequential(
            [keras.layers.Dense(32, activation="relu"), keras.layers.Dense(6)]
        )
        self.tracker = keras.metrics.Mean(name="loss")

    def call(self, x):
        return self.embed(x)

    def train_step(self, data):
        left, right, same = data
        with tf.GradientTape() as tape:
            squared = tf.reduce_sum(tf.square(self(left) - self(right)), axis=1)
            apart = tf.square(tf.maximum(2.0 - tf.sqrt(squared + 1e-9), 0.0))
            loss = tf.reduce_mean(same * squared + (1.0 - same) * apart)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.tracker.update_state(loss)
        return {"loss": self.tracker.result()}


keras.utils.set_random_seed(11)
model = PairModel()
model.compile(optimizer=keras.optimizers.Adam(1e-3))
model.fit(tf.data.Dataset.from_tensor_slices(pairs(1280)).batch(32), epochs=2, verbose=2)
