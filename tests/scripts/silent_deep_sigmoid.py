"""A deep stack of sigmoid layers (Glorot init, plain SGD): the gradient shrinks by about
4x at each sigmoid on the way back, so the first layers get almost none, and the
classifier stays at chance (the loss stays at log 2) for the whole run. Nothing is ever
non-finite.

Expected: status=problem category=vanishing_gradients (promoted: still in force at the
end and the loss did not improve), exit 1.
"""

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 16)).astype("float32")
y = (x[:, :8].sum(axis=1) * x[:, 8:].sum(axis=1) > 0).astype("float32")

model = keras.Sequential([keras.Input((16,))])
for _ in range(12):
    model.add(keras.layers.Dense(32, activation="sigmoid"))
model.add(keras.layers.Dense(1, activation="sigmoid"))
model.compile(
    optimizer=keras.optimizers.SGD(0.01), loss="binary_crossentropy", metrics=["accuracy"]
)
history = model.fit(x, y, batch_size=32, epochs=5, verbose=0)
print("accuracy per epoch:", [round(a, 3) for a in history.history["accuracy"]])
