"""An eager custom loop (no tf.function) whose log sees a negative value.

Expected: category=forward_domain op=Log phase=forward (the tf.math.log line)
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.05)
features = np.abs(np.random.randn(32, 4)).astype("float32")


def train_step(batch, offset):
    with tf.GradientTape() as tape:
        rate = model(batch)
        # a Poisson-style loss written by hand: log of a value that can go negative
        loss = tf.reduce_mean(rate - tf.math.log(rate - offset))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step in range(6):
    print("loss", float(train_step(tf.constant(features), 0.5 * step)))
