"""MultiWorkerMirroredStrategy in its single-worker form (no TF_CONFIG): NaN in batch 2.

Row 70 (batch 2 of 4, row 6) holds a NaN feature. The script prints whether the
weights stayed finite.
"""

import os

import numpy as np
import tensorflow as tf

os.environ.pop("TF_CONFIG", None)

import keras  # noqa: E402


def main() -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 4)).astype("float32")
    y = rng.normal(size=(128, 1)).astype("float32")
    x[70, 1] = np.nan
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
        )
        model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    print("weights finite:", bool(np.isfinite(model.layers[0].kernel.numpy()).all()))


if __name__ == "__main__":
    main()
