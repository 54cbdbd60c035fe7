"""Sensor windows standardised per window inside the tf.data pipeline given to `fit`; a
few windows are flat (a stuck sensor), so their std is 0 and the map writes NaN into the
batch.

The doctor should find: bad_input, its origin the RealDiv on the `window = ...` line of
`standardise` (the input pipeline's function, replayed on a flat window), and a safe
division patch of that line that holds when rerun.
"""

import keras
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(3)
windows = rng.normal(size=(1200, 32)).astype("float32")
windows[rng.choice(1200, 6, replace=False)] = 1.5  # stuck sensor readings
labels = (windows.mean(axis=1) > 0).astype("float32")


def standardise(window, label):
    window = (window - tf.reduce_mean(window)) / tf.math.reduce_std(window)
    return window, label


train = (
    tf.data.Dataset.from_tensor_slices((windows, labels))
    .shuffle(1200, seed=3)
    .map(standardise)
    .batch(32)
)
model = keras.Sequential(
    [
        keras.Input((32,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(1, activation="sigmoid"),
    ]
)
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
model.fit(train, epochs=3, verbose=2)
