"""Weights copied from an earlier run with `set_weights`, one of which is NaN.

The output layer's kernel holds a NaN before training starts; the loss is NaN at step
0 although no op made it. Expected: bad_input naming `sequential/output/kernel`, its
layer and the `set_weights` line (source_kind state_write).
"""

import keras
import numpy as np


def build() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(1, name="output"),
        ]
    )


def main() -> None:
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(128, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    saved = [w.copy() for w in build().get_weights()]
    saved[2][5, 0] = np.nan  # the output kernel went bad in the earlier run
    model = build()
    model.set_weights(saved)
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)


if __name__ == "__main__":
    main()
