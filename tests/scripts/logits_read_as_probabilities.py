"""Silent failure: a 4-class classifier whose last Dense has no softmax, compiled with
CategoricalCrossentropy() (from_logits=False by default). Keras divides the raw outputs
by their sum and clips them into [1e-7, 1 - 1e-7]: nothing goes non-finite, and the
model learns little. Expected: logits_as_probabilities at step 0, the output layer
given a softmax (or the loss told from_logits=True), each patch rerun and learning more."""

import keras
import numpy as np
from keras import layers

keras.utils.set_random_seed(16)
rng = np.random.default_rng(16)
centers = rng.normal(size=(4, 8)) * 2
labels = rng.integers(0, 4, 1200)
features = (centers[labels] + rng.normal(size=(1200, 8))).astype("float32")
targets = keras.utils.to_categorical(labels, 4)

model = keras.Sequential(
    [
        keras.Input((8,)),
        layers.Dense(32, activation="relu"),
        layers.Dense(4),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss=keras.losses.CategoricalCrossentropy(),
    metrics=["accuracy"],
)
history = model.fit(features, targets, epochs=4, batch_size=32, verbose=0)
print("accuracy", round(history.history["accuracy"][-1], 3))
