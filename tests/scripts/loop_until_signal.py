"""A healthy custom tf.function loop that trains until a signal stops it (a job that a
scheduler, `timeout` or `docker stop` ends with SIGTERM).

Each step prints "step N" once it has run, so a test knows how far training got.

Expected under SIGTERM: status=interrupted (nothing found before the signal), exit 143,
every requested report written, steps_watched = the steps printed (or one more).
"""

import time

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(11)
features = np.random.default_rng(11).normal(size=(64, 6)).astype("float32")
targets = features @ np.linspace(-1.0, 1.0, 6, dtype="float32")[:, None]
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, "tanh"), keras.layers.Dense(1)])
optimizer = keras.optimizers.Adam(1e-3)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


print("training", flush=True)
step = 0
while True:
    loss = train_step(features, targets)
    print(f"step {step} loss {float(loss):.5f}", flush=True)
    step += 1
    time.sleep(0.01)
