"""A hand-written loop of `train_on_batch` calls; a hand-written sigmoid overflows on raw data.

Column 2 of the rows from 300 on holds 120: exp(120) overflows float32, so the batch
of rows 288-319 (step 9) is the first non-finite step. No weight lies between the
data and the exp: the doctor must blame the data, and propose the library's sigmoid.
"""

import keras
import numpy as np
from keras import ops

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 6)).astype("float32")
y = rng.integers(0, 3, size=(512,))
x[300:, 2] = 120.0

inputs = keras.Input((6,))
squashed = keras.layers.Lambda(lambda t: ops.exp(t) / (1.0 + ops.exp(t)), name="squash")(inputs)
hidden = keras.layers.Dense(16, activation="relu")(squashed)
model = keras.Model(inputs, keras.layers.Dense(3)(hidden))
model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
for epoch in range(2):
    for start in range(0, len(x), 32):
        logs = model.train_on_batch(x[start : start + 32], y[start : start + 32], return_dict=True)
    print("epoch", epoch, logs)
