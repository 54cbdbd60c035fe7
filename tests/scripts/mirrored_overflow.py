"""MirroredStrategy on two logical CPUs: one replica's shard overflows `exp` at step 3.

Batches of 32 split into two shards of 16; row 120 (batch 3, replica 1's shard, row 8)
holds a feature of 500, and exp(500) overflows float32. With `--healthy` every row is
small: the script prints each epoch's loss, to compare watched and unwatched runs.
"""

import sys

import numpy as np
import tensorflow as tf

cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402


class ExpFeatures(keras.layers.Layer):
    """Positive features by exponentiation (overflows for inputs above 88.7)."""

    def call(self, inputs):
        return tf.exp(inputs)


def main() -> None:
    healthy = "--healthy" in sys.argv
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = rng.normal(size=(256, 1)).astype("float32")
    if not healthy:
        x[120, 0] = 500.0
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential(
            [
                keras.Input((4,)),
                ExpFeatures(),
                keras.layers.Dense(8, activation="relu"),
                keras.layers.Dropout(0.2),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    history = model.fit(x, y, batch_size=32, epochs=3 if healthy else 1, shuffle=False, verbose=0)
    print("losses:", " ".join(repr(v) for v in history.history["loss"]))
    print("kernel sum:", repr(float(np.sum(model.layers[1].kernel.numpy()))))
    copies = [c.numpy() for c in model.layers[1].kernel.value.values]
    same = all(np.array_equal(copies[0], c) for c in copies)
    print(f"replica copies: {len(copies)}, identical: {same}, finite: {np.isfinite(copies).all()}")


if __name__ == "__main__":
    main()
