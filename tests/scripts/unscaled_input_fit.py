"""House-price style regression fitted on raw, unscaled features (areas in m², prices in
euros), the way a first Keras tutorial attempt looks.

The features reach ~10^4 (the targets, in units of 100 000 euros, are a few units): the
first updates of the Dense layers are enormous, the predictions run away, and within a
few steps the gradients overflow float32. The data is the cause: the doctor should
propose standardising the features (`normalize_input`) as a patch of the
`model.fit(...)` line, and prove it.
"""

import keras
import numpy as np

keras.utils.set_random_seed(7)
rng = np.random.default_rng(7)
area = rng.uniform(40, 250, size=(512, 1))
rooms = rng.integers(1, 7, size=(512, 1))
year = rng.uniform(1900, 2024, size=(512, 1))
lot = rng.uniform(100, 20000, size=(512, 1))
features = np.concatenate([area, rooms, year, lot], axis=1).astype("float32")
prices = (3000 * area + 20000 * rooms + 50 * (year - 1900) + 2 * lot).astype("float32")

model = keras.Sequential(
    [
        keras.Input((4,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer=keras.optimizers.SGD(learning_rate=1e-3), loss="mse")
history = model.fit(features, prices / 1e5, batch_size=32, epochs=3, verbose=0)
print("final loss", history.history["loss"][-1])
