"""A Normalization layer adapted on a clean table, then a short fit: healthy.

Expected: status healthy, and the losses printed exactly as without the doctor.
"""

import keras
import numpy as np

keras.utils.set_random_seed(0)
table = np.random.default_rng(0).normal(3.0, 2.0, size=(160, 4)).astype("float32")
target = table.sum(axis=1, keepdims=True)

normalizer = keras.layers.Normalization()
normalizer.adapt(table)
model = keras.Sequential([keras.Input((4,)), normalizer, keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
history = model.fit(table, target, batch_size=32, epochs=2, verbose=0)
print("losses:", [float(loss).hex() for loss in history.history["loss"]])
