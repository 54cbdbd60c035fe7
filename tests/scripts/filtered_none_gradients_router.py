"""A hard-routed mixture of two experts, in an eager loop that drops `None` gradients.

The router picks an expert with `tf.argmax`, so no gradient reaches it; the loop's
common `[(g, v) for g, v in zip(grads, variables) if g is not None]` hands the
optimizer only the experts' gradients, and Keras never warns: the router never trains.
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(3)
rng = np.random.default_rng(3)
x = rng.normal(size=(128, 6)).astype("float32")
y = np.where(x[:, :1] > 0, 2 * x[:, 1:2], -x[:, 2:3]).astype("float32")

router = keras.layers.Dense(2, name="router")
experts = [keras.layers.Dense(1, name=f"expert{i}") for i in range(2)]
optimizer = keras.optimizers.Adam(1e-2)


def forward(batch):
    route = tf.argmax(router(batch), axis=-1)
    outputs = tf.concat([expert(batch) for expert in experts], axis=1)
    return tf.reduce_sum(tf.one_hot(route, 2) * outputs, axis=1, keepdims=True)


forward(x[:2])
variables = router.trainable_variables + [v for e in experts for v in e.trainable_variables]
for start in range(0, 128, 16):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(forward(x[start : start + 16]) - y[start : start + 16]))
    grads = tape.gradient(loss, variables)
    optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])
print("last loss", float(loss))
