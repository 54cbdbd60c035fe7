"""Functional Keras model with a Lambda layer taking the log of a ReLU output (count
regression in log space), trained with fit on NumPy arrays.

The doctor should find: forward_domain at the Log of the Lambda line, most of its input
exact zeros the `Dense(1, activation="relu")` made, and as the first fix that layer's
activation named softplus where it was built (the clamp at the log second, as a clamp
of most of the values).
"""

import keras
import numpy as np
from keras import layers, ops

keras.utils.set_random_seed(0)
x = np.random.normal(size=(2000, 10)).astype("float32")
y = np.random.poisson(3.0, size=(2000, 1)).astype("float32")

inputs = keras.Input((10,))
h = layers.Dense(32, activation="relu")(inputs)
rate = layers.Dense(1, activation="relu")(h)
log_rate = layers.Lambda(lambda r: ops.log(r), name="log_rate")(rate)
model = keras.Model(inputs, log_rate)
model.compile(
    optimizer=keras.optimizers.Adam(1e-2), loss=lambda yt, lr: ops.mean(ops.exp(lr) - yt * lr)
)
model.fit(x, y, batch_size=64, epochs=3, verbose=2)
