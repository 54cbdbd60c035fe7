"""Sensor-forecast regressor whose loss is computed after the tape block: all gradients `None`.

A `tf.function` custom training loop for a small model that forecasts the next reading of
a noisy sensor from its last 12 readings. The forward pass runs inside
`with tf.GradientTape() as tape:`, but the loss line sits one indentation level too far
left, after the block: the tape has stopped recording when the loss (the `Sub` of the
prediction and the target, then `Square` and `Mean`) is computed, so `tape.gradient`
finds no recorded path from the loss to any variable and returns `None` for all 4
trainable variables (2 Dense layers, kernel and bias each). No op is non-differentiable
here; the path breaks at the tape's boundary, on the loss line.

Run plainly, tracing the first step fails in `optimizer.apply_gradients` with Keras's
`ValueError: No gradients provided for any variable.` (expected: no step runs).

Expected: category=disconnected_gradients variables=4 all=true op=Sub (computed outside
the tape) line="loss = tf.reduce_mean(tf.square(forecast - target))"
"""

import keras
import numpy as np
import tensorflow as tf

WINDOW = 12
NUM_WINDOWS = 1024
BATCH_SIZE = 64
EPOCHS = 3


def make_readings(rng):
    """Windows of a noisy daily-cycle sensor signal and the reading that follows each."""
    t = np.arange(NUM_WINDOWS + WINDOW)
    signal = np.sin(2 * np.pi * t / 24.0) + 0.1 * rng.normal(size=t.shape)
    windows = np.stack([signal[i : i + WINDOW] for i in range(NUM_WINDOWS)])
    following = signal[WINDOW : WINDOW + NUM_WINDOWS]
    return windows.astype("float32"), following[:, None].astype("float32")


def main():
    keras.utils.set_random_seed(5)
    windows, following = make_readings(np.random.default_rng(5))
    dataset = (
        tf.data.Dataset.from_tensor_slices((windows, following))
        .shuffle(NUM_WINDOWS, seed=5)
        .batch(BATCH_SIZE, drop_remainder=True)
    )
    model = keras.Sequential(
        [
            keras.Input((WINDOW,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    optimizer = keras.optimizers.SGD(1e-2, momentum=0.9)

    @tf.function
    def train_step(window, target):
        with tf.GradientTape() as tape:
            forecast = model(window, training=True)
        loss = tf.reduce_mean(tf.square(forecast - target))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for epoch in range(EPOCHS):
        for window, target in dataset:
            loss = train_step(window, target)
        print(f"epoch {epoch}: loss={float(loss):.4f}")


if __name__ == "__main__":
    main()
