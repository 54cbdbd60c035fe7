"""A regression fit whose data has NaN in one feature of a few rows.

Expected: category=bad_input
"""

import keras
import numpy as np

keras.utils.set_random_seed(0)
x = np.random.randn(256, 5).astype("float32")
y = x.sum(axis=1, keepdims=True)
x[70, 2] = np.nan  # in the third batch of 32
model = keras.Sequential(
    [keras.Input((5,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer="adam", loss="mse")
model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
