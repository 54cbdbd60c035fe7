"""An eager loop whose loss is rebuilt from NumPy predictions, with the None gradients
the tape returns filled in with zeros before the update (a common guard against
Keras's "No gradients provided"): nothing warns, the model never trains."""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(14)
rng = np.random.default_rng(14)
x = rng.normal(size=(256, 5)).astype("float32")
y = x @ np.array([[1.0], [-2.0], [0.5], [0.0], [1.5]], dtype="float32")

model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, "tanh"), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.05)

for _ in range(30):
    index = rng.integers(0, 256, size=32)
    with tf.GradientTape() as tape:
        predictions = np.clip(model(x[index]).numpy(), -10, 10)
        loss = tf.reduce_mean(tf.square(tf.constant(predictions) - y[index]))
    grads = tape.gradient(loss, model.trainable_variables)
    grads = [
        g if g is not None else tf.zeros_like(v) for g, v in zip(grads, model.trainable_variables)
    ]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
