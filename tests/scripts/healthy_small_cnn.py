"""A small CNN told to tell horizontal from vertical bars in noisy 12x12 images:
two ReLU convolutions, pooling and a softmax head, trained with Adam. It learns the
task within the first epoch. Healthy.

Expected: status=healthy, exit 0.
"""

import keras
import numpy as np


def bars(rng, count):
    images = rng.normal(scale=0.3, size=(count, 12, 12, 1)).astype("float32")
    labels = rng.integers(2, size=count)
    for image, label, where in zip(images, labels, rng.integers(2, 10, size=count)):
        if label:
            image[:, where, 0] += 1.5
        else:
            image[where, :, 0] += 1.5
    return images, labels


def build():
    return keras.Sequential(
        [
            keras.Input((12, 12, 1)),
            keras.layers.Conv2D(8, 3, activation="relu", padding="same"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )


if __name__ == "__main__":
    keras.utils.set_random_seed(4)
    images, labels = bars(np.random.default_rng(4), 2048)
    model = build()
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    history = model.fit(images, labels, batch_size=32, epochs=3, verbose=0)
    print("accuracy per epoch:", [round(a, 3) for a in history.history["accuracy"]])
