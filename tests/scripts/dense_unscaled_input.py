"""Sensor readings near float32's limit, never scaled, fed to a Sequential regressor.

The first Dense's MatMul sums 32 readings of 1e38-3e38 and overflows at step 0. The op
runs in Keras's code; the line to change is the one that created that Dense (written
over several lines). Expected: forward_overflow, op MatMul in layer `sequential/dense`,
the origin at the `layers.Dense(` line of the hidden layer (source_kind layer_creation).
"""

import keras
import numpy as np
from keras import layers

keras.utils.set_random_seed(0)
readings = np.random.default_rng(0).uniform(1.0, 3.0, size=(64, 32)) * 1e38
x = readings.astype("float32")
y = np.zeros((64, 1), "float32")
model = keras.Sequential(
    [
        keras.Input((32,)),
        layers.Dense(  # hidden
            16,
            activation="relu",
        ),
        layers.Dense(1),
    ]
)
model.compile(optimizer="adam", loss="mae")
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
