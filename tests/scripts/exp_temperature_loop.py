"""A custom loop whose hand-written softmax is sharpened a little more every step.

The scores fed to `tf.exp` are a Dense layer's output times a temperature that grows
by 0.1 per step, so their maximum grows steadily until float32 exp overflows (above
88.72) after about a hundred steps. Every step prints its loss and the largest score, so a
test can check the values the doctor watched against what training computed.

Expected: category=forward_overflow op=Exp phase=forward (the tf.exp line)
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(3)
features = tf.constant(np.random.default_rng(3).uniform(0.5, 1.5, (16, 6)).astype("float32"))
targets = tf.one_hot(np.arange(16) % 4, 4)
layer = keras.layers.Dense(4, kernel_initializer="ones")
optimizer = keras.optimizers.SGD(0.01)


@tf.function
def train_step(temperature):
    with tf.GradientTape() as tape:
        scores = layer(features) * temperature
        weights = tf.exp(scores)
        probabilities = weights / tf.reduce_sum(weights, axis=-1, keepdims=True)
        loss = tf.reduce_mean(tf.square(probabilities - targets))
    grads = tape.gradient(loss, layer.trainable_variables)
    optimizer.apply_gradients(zip(grads, layer.trainable_variables))
    return loss, tf.reduce_max(scores)


for step in range(200):
    loss, largest = train_step(tf.constant(1.0 + 0.1 * step))
    print(f"step {step} loss {float(loss):.9g} largest {float(largest):.9g}", flush=True)
