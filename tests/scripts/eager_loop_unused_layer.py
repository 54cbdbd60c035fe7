"""A module-level eager loop that trains a layer it never calls: Keras only warns.

Expected: category=disconnected_gradients, 2 variables (the unused layer), one finding
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
body = keras.layers.Dense(4)
head = keras.layers.Dense(1)
aux = keras.layers.Dense(2)
x = np.random.randn(16, 3).astype("float32")
y = np.random.randn(16, 1).astype("float32")
body.build((None, 3))
head.build((None, 4))
aux.build((None, 4))
variables = body.trainable_variables + head.trainable_variables + aux.trainable_variables
opt = keras.optimizers.SGD(0.01)
for _ in range(6):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(head(body(x)) - y))
    grads = tape.gradient(loss, variables)
    opt.apply_gradients(zip(grads, variables))
print("done")
