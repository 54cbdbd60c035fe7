"""A healthy small classifier: nothing should be reported.

A 3-class classifier on synthetic 2-D-ish data (three Gaussian blobs embedded in 16
features), built from Dense layers with BatchNormalization and Dropout, trained with
`model.fit` for a few epochs. Losses, gradients and weights stay finite and well
scaled throughout; a diagnosis tool watching this run should stay quiet.

Expected: healthy
"""

import keras
import numpy as np
import tensorflow as tf

NUM_SAMPLES = 3000
NUM_FEATURES = 16
NUM_CLASSES = 3
BATCH_SIZE = 64
EPOCHS = 5


def make_blobs(rng):
    """Three noisy Gaussian blobs, one per class."""
    centers = rng.normal(scale=2.0, size=(NUM_CLASSES, NUM_FEATURES))
    labels = rng.integers(NUM_CLASSES, size=NUM_SAMPLES)
    x = centers[labels] + rng.normal(size=(NUM_SAMPLES, NUM_FEATURES))
    return x.astype("float32"), labels.astype("int32")


def build_model():
    return keras.Sequential(
        [
            keras.Input((NUM_FEATURES,)),
            keras.layers.Dense(64, use_bias=False),  # BatchNormalization supplies the shift
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(32, use_bias=False),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(NUM_CLASSES),  # logits
        ]
    )


def main():
    keras.utils.set_random_seed(4)
    x, y = make_blobs(np.random.default_rng(4))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(NUM_SAMPLES, seed=4)
    dataset = dataset.batch(BATCH_SIZE)
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        # from_logits=True: the loss applies a numerically stable log-softmax itself.
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = model.fit(dataset, epochs=EPOCHS, verbose=2)
    print("final loss:", history.history["loss"][-1])


if __name__ == "__main__":
    main()
