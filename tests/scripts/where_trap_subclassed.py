"""A subclassed model whose loss uses `tf.where` to guard a log: the gradient still NaNs.

Expected: category=backward_singularity op=Reciprocal phase=backward gradient_of=Log
(on the tf.math.log line)
"""

import keras
import numpy as np
import tensorflow as tf


class PositiveHead(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)


def log_or_zero(p):
    return tf.where(p > 0.0, tf.math.log(p), tf.zeros_like(p))


keras.utils.set_random_seed(3)
x = np.random.randn(64, 3).astype("float32")
x[7] = 0.0  # with a zero bias, this row makes p exactly 0
model = PositiveHead()
model(x[:1])
model.dense.bias.assign([0.0])
optimizer = keras.optimizers.SGD(0.01)


@tf.function
def train_step(batch):
    with tf.GradientTape() as tape:
        loss = -tf.reduce_mean(log_or_zero(model(batch)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for _ in range(3):
    print("loss", float(train_step(tf.constant(x))))
