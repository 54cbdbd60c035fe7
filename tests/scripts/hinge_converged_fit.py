"""A linear SVM (Keras `Hinge`, SGD, no regulariser) on separable data: once every point
is past the margin the loss is exactly 0 and so is every gradient. Training converged;
zero gradients at a loss of 0 are no broken path. Expected: healthy."""

import keras
import numpy as np

keras.utils.set_random_seed(71)
rng = np.random.default_rng(71)
x = rng.normal(size=(1200, 4)).astype("float32")
score = x @ np.array([1.5, -2.0, 0.5, 1.0])
keep = np.abs(score) > 1.0  # a clear gap between the classes
x, y = x[keep], np.where(score[keep] > 0, 1.0, -1.0).astype("float32")[:, None]

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(2.0), loss=keras.losses.Hinge())
history = model.fit(x, y, batch_size=64, epochs=8, verbose=0)
print("final loss:", history.history["loss"][-1])
