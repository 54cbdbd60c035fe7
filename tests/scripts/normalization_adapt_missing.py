"""A Normalization layer adapted on the raw table, which has one missing value.

The model trains on the rows without missing values, but `adapt` saw them all: the
layer's learned mean and variance hold NaN, and every output is NaN from step 0.
Expected: bad_input naming `normalization/mean` in layer `normalization` and the line
`normalizer.adapt(table)` that wrote it (source_kind state_write).
"""

import keras
import numpy as np

keras.utils.set_random_seed(0)
table = np.random.default_rng(0).normal(3.0, 2.0, size=(160, 4)).astype("float32")
table[17, 2] = np.nan  # a missing reading
complete = table[~np.isnan(table).any(axis=1)]
target = complete.sum(axis=1, keepdims=True)

normalizer = keras.layers.Normalization()
normalizer.adapt(table)

inputs = keras.Input((4,))
hidden = keras.layers.Dense(8, activation="tanh")(normalizer(inputs))
model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
model.compile(optimizer="adam", loss="mse")
model.fit(complete, target, batch_size=32, epochs=1, verbose=0)
