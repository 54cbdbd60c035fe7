"""model.fit with batch normalisation and dropout, whose hand-written exp overflows.

A custom layer feeds a Dense output to `tf.exp`. The rows grow along the epoch, so
the scores grow batch after batch until float32 exp overflows (above 88.72) in the
seventh batch. BatchNormalization updates its moving statistics in the step and
Dropout draws from a seed generator, so a crash dump must carry both to replay the
failing step exactly.

Expected: category=forward_overflow op=Exp phase=forward step=6 (the tf.exp line)
"""

import keras
import numpy as np
import tensorflow as tf


class Exponential(keras.layers.Layer):
    def call(self, scores):
        return tf.exp(scores)


keras.utils.set_random_seed(5)
rng = np.random.default_rng(5)
growth = 1.0 + np.arange(256, dtype="float32")[:, None] / 16.0
x = (rng.uniform(0.5, 1.5, (256, 6)) * growth).astype("float32")
y = rng.normal(size=(256, 1)).astype("float32")
model = keras.Sequential(
    [
        keras.Input((6,)),
        keras.layers.Dense(4, kernel_initializer="ones"),
        Exponential(name="exponential"),
        keras.layers.BatchNormalization(),
        keras.layers.Dropout(0.25),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse")
model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
