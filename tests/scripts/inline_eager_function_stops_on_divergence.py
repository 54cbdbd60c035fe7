"""A training function whose eager loop breaks when the loss diverges (a test that NaN
fails too, and no finiteness test), then returns, and the script ends cleanly: nothing
holds the loss any more but the trace of the step in progress. Each row is scaled by the
spread of its features, and a block of all-zero rows has spread 0."""

import numpy as np
import tensorflow as tf


def train():
    tf.keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = rng.normal(size=(256, 1)).astype("float32")
    x[128:160] = 0.0
    model = tf.keras.Sequential(
        [tf.keras.layers.Dense(16, activation="tanh"), tf.keras.layers.Dense(1)]
    )
    opt = tf.keras.optimizers.Adam(1e-2)
    for step in range(8):
        xb, yb = x[step * 32 : step * 32 + 32], y[step * 32 : step * 32 + 32]
        with tf.GradientTape() as tape:
            scale = tf.math.reduce_std(xb, axis=1, keepdims=True)
            loss = tf.reduce_mean(tf.square(model(xb) - yb) / scale)
        if not float(loss) < 1e4:
            print("stopping: loss", loss.numpy())
            break
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        print("step", step, float(loss))


train()
print("done")
