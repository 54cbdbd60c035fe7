"""A healthy Keras `fit` with far more epochs than anyone waits for: stopped with Ctrl-C.

A callback prints "batch N" after each batch, so a test knows training is under way.

Expected under SIGINT: status=interrupted, exit 130, the KeyboardInterrupt's traceback
on stderr (your frames only), every requested report written.
"""

import keras
import numpy as np


class SayBatches(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        print(f"batch {self.batches}", flush=True)
        self.batches += 1


def main():
    keras.utils.set_random_seed(5)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(256, 10)).astype("float32")
    y = (x[:, :3].sum(axis=1) > 0).astype("float32")
    model = keras.Sequential(
        [keras.Input((10,)), keras.layers.Dense(16, "relu"), keras.layers.Dense(1, "sigmoid")]
    )
    model.compile(optimizer="adam", loss="binary_crossentropy")
    model.fit(x, y, batch_size=32, epochs=100_000, verbose=0, callbacks=[SayBatches()])


if __name__ == "__main__":
    main()
