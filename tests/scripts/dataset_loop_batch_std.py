"""A `tf.function` loop over a `tf.data` pipeline; a custom layer divides by the batch's std.

Rows 320-351 are identical, so the batch at step 10 has a standard deviation of 0:
the division in `Standardize` writes NaN. Its denominator comes from the batch alone.
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(2)
rng = np.random.default_rng(2)
x = rng.normal(size=(640, 5)).astype("float32")
x[320:352] = 1.0
y = rng.normal(size=(640, 1)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2.0, b)).batch(32)


class Standardize(keras.layers.Layer):
    def call(self, t):
        mean = tf.reduce_mean(t, axis=0, keepdims=True)
        std = tf.math.reduce_std(t, axis=0, keepdims=True)
        return (t - mean) / std


model = keras.Sequential(
    [
        keras.Input((5,)),
        Standardize(),
        keras.layers.Dense(8, activation="tanh"),
        keras.layers.Dense(1),
    ]
)
optimizer = keras.optimizers.RMSprop(1e-3)


@tf.function
def train_step(a, b):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(a, training=True) - b))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(2):
    for a, b in data:
        loss = train_step(a, b)
    print("epoch", epoch, float(loss))
