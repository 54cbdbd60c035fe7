"""A frozen feature extractor (`trainable=False`, as after loading pre-trained weights)
whose ReLU features are sparse: most of its units never fire on this data. Only the
head on top trains, on a noisy target, so the loss soon levels off at the noise.

The frozen layer's dead units are a fact of the extractor, not a failure of training:
the doctor may warn about them, but the run must end healthy.

Expected: status=healthy, exit 0.
"""

import keras
import numpy as np

keras.utils.set_random_seed(6)
rng = np.random.default_rng(6)
inputs = rng.normal(size=(4096, 12)).astype("float32")
signal = inputs[:, :1] - 0.5 * inputs[:, 1:2]
target = (signal + rng.normal(scale=1.5, size=signal.shape)).astype("float32")

extractor = keras.layers.Dense(64, activation="relu", name="extractor")
head = keras.Sequential(
    [keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)], name="head"
)
model = keras.Sequential([keras.Input((12,)), extractor, head])
kernel, bias = extractor.get_weights()
bias[4:] = -20.0  # the "pre-trained" extractor: 60 of its 64 units never fire here
extractor.set_weights([kernel, bias])
extractor.trainable = False

model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
history = model.fit(inputs, target, batch_size=32, epochs=3, verbose=0)
print("loss per epoch:", [round(v, 4) for v in history.history["loss"]])
