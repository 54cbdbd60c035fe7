"""Raw timestamps (~1e18 ns) and a 1e21-scale feature, unscaled, in a `fit` with Adam and MAE.

The loss stays finite (MAE squares nothing), and so does every gradient, but the hidden
layer's kernel gradient reaches ~2e20: its square (Adam's second moment, the global
norm) overflows float32 at step 0. Expected: exploding_gradients naming the variable
`sequential/hidden/kernel`, its layer `sequential/hidden` and the line that created it.
"""

import keras
import numpy as np
from keras import layers

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
timestamps = 1.7e18 + rng.uniform(0, 1e17, 256)
volume = rng.uniform(0, 1e21, 256)
x = np.stack([timestamps, volume], axis=1).astype("float32")
y = rng.normal(size=(256, 1)).astype("float32")

model = keras.Sequential()
model.add(keras.Input((2,)))
model.add(layers.Dense(8, activation="relu", name="hidden"))
model.add(layers.Dense(1, name="out"))
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mae")
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
