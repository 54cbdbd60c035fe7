"""A tanh regressor fed one raw, unnormalised column (altitude in metres, around 300)
beside nine standardised ones: every unit of the first tanh layer sees a pre-activation
in the hundreds, so it sits at -1 or +1 for every example, where tanh is flat. Almost
no gradient gets through, plain SGD never moves the units out of the flat ends, and
the loss stays at what predicting the mean gives. Nothing is ever non-finite.

Expected: status=problem category=saturation (promoted: still in force at the end and
the loss did not improve), exit 1. With `--adam` the same saturated layer is there, but
Adam's per-weight step size gets the model learning (the loss falls): that run stays
`healthy`, its saturation a warning. With `--feet` the column is in feet (around 1000):
the first layer's pre-activations are so large that float32 rounds tanh's slope to
exactly 0 from the first step, so the layer's weights get exactly zero gradient.

Expected (with --feet): category=saturation (zero gradients named as saturated units,
not disconnected_gradients), exit 1.
"""

import sys

import keras
import numpy as np


def readings(rng, count):
    columns = rng.normal(size=(count, 10)).astype("float32")
    columns[:, 9] = rng.normal(300.0, 1.0, size=count)  # altitude, metres
    if "--feet" in sys.argv:
        columns[:, 9] *= 3.28
    target = np.sin(columns[:, :1] * 2.0) + 0.5 * columns[:, 1:2]
    return columns, target.astype("float32")


def main():
    keras.utils.set_random_seed(1)
    features, target = readings(np.random.default_rng(1), 4096)
    model = keras.Sequential(
        [keras.Input((10,))]
        + [keras.layers.Dense(64, activation="tanh") for _ in range(3)]
        + [keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.Adam(1e-3) if "--adam" in sys.argv else keras.optimizers.SGD(1e-3)
    model.compile(optimizer=optimizer, loss="mse")
    history = model.fit(features, target, batch_size=32, epochs=3, verbose=0)
    print("loss per epoch:", [round(v, 4) for v in history.history["loss"]])


if __name__ == "__main__":
    main()
