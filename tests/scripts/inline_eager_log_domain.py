"""The tutorial's eager loop written inline (module level, no function, no tf.function).

A count model trained with a Poisson loss written by hand: the log-rate is shifted by
a baseline that grows every step, until the log's argument goes negative.

Expected: category=forward_domain op=Log phase=forward step=3 (the tf.math.log line)
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
model = keras.Sequential(
    [
        keras.Input((4,)),
        keras.layers.Dense(8, activation="relu"),
        keras.layers.Dense(1, activation="softplus"),
    ]
)
optimizer = keras.optimizers.Adam(learning_rate=1e-3)
features = np.abs(np.random.randn(64, 4)).astype("float32")
counts = np.random.poisson(2.0, size=(64, 1)).astype("float32")

for step in range(8):
    baseline = 0.08 * step
    with tf.GradientTape() as tape:
        rate = model(features, training=True)
        loss = tf.reduce_mean(rate - counts * tf.math.log(rate - baseline))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    print(f"step {step} loss {float(loss):.4f}")
