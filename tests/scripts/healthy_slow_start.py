"""A slow starter: six tanh layers initialised very small (normal, stddev 0.02) sit near
the saddle at zero, so for the first ~100 steps the loss barely moves; then Adam finds
its way out and the loss falls to about half. Healthy: nothing must be flagged as a
failure (a warning raised on the way may stay a warning).

Expected: status=healthy, exit 0.
"""

import keras
import numpy as np


def dataset(seed):
    rng = np.random.default_rng(seed)
    inputs = rng.normal(size=(2048, 8)).astype("float32")
    target = np.sin(2.0 * inputs[:, :1]) + 0.5 * inputs[:, 1:2] * inputs[:, 2:3]
    return inputs, target.astype("float32")


keras.utils.set_random_seed(1)
inputs, target = dataset(1)
small = keras.initializers.RandomNormal(stddev=0.02, seed=1)
model = keras.Sequential(
    [keras.Input((8,))]
    + [keras.layers.Dense(32, activation="tanh", kernel_initializer=small) for _ in range(6)]
    + [keras.layers.Dense(1, kernel_initializer=small)]
)
model.compile(optimizer=keras.optimizers.Adam(5e-4), loss="mse")
history = model.fit(inputs, target, batch_size=32, epochs=4, verbose=0)
print("loss per epoch:", [round(v, 4) for v in history.history["loss"]])
