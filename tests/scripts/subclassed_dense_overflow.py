"""A subclassed regressor (layers made in `__init__`, no Input) fed unscaled readings.

The `hidden` Dense's MatMul overflows at step 0, inside Keras's code. Expected:
forward_overflow, op MatMul in layer `regressor/dense`, the origin at the line in
`__init__` that created `self.hidden` (source_kind layer_creation), not the `call` or
`fit` line.
"""

import keras
import numpy as np
from keras import layers


class Regressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = layers.Dense(16, activation="relu")
        self.head = layers.Dense(1)

    def call(self, inputs):
        return self.head(self.hidden(inputs))


def main() -> None:
    keras.utils.set_random_seed(0)
    x = (np.random.default_rng(0).uniform(1.0, 3.0, size=(64, 32)) * 1e38).astype("float32")
    y = np.zeros((64, 1), "float32")
    model = Regressor()
    model.compile(optimizer="adam", loss="mae")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)


if __name__ == "__main__":
    main()
