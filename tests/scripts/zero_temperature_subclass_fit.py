"""A classifier whose logits are divided by a learned temperature, written as a subclassed
model without `Input` (built lazily by `fit`). The temperature is made with
`initializer="zeros"`: the first forward pass divides by 0. Clipping, a lower learning
rate or a safe division cannot help; the temperature must start elsewhere."""

import keras
import numpy as np

rng = np.random.default_rng(3)
features = rng.normal(size=(512, 12)).astype("float32")
labels = (features[:, :3].sum(axis=1) > 0).astype("int64")


class TemperatureScaled(keras.Model):
    def __init__(self, classes):
        super().__init__()
        self.hidden = keras.layers.Dense(32, activation="relu")
        self.logits = keras.layers.Dense(classes)
        self.temperature = self.add_weight(shape=(), initializer="zeros", name="temperature")

    def call(self, inputs):
        return self.logits(self.hidden(inputs)) / self.temperature


keras.utils.set_random_seed(3)
model = TemperatureScaled(2)
model.compile(
    optimizer=keras.optimizers.Adam(1e-2),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)
model.fit(features, labels, batch_size=32, epochs=2, verbose=2)
