"""A sensor regressor trained in pure float16 by a `tf.GradientTape` loop with Adam.

The readings (0-40) and the targets are raw, so the first gradients reach several
hundred. Adam keeps each gradient's square in its `velocity` slot, in the variables'
dtype: float16, whose largest value is 65504. Step 0's update squares gradients past
it (inf in `velocity`, the weights still finite), step 1's computes inf - inf there and
writes NaN into the kernels (its loss still finite), and step 2's loss is NaN. The guard
checks the loss and the gradients before each update, and both were finite at steps 0
and 1: those updates were applied. Under "mixed_float16" the same loop trains.

Expected: optimizer_overflow at step 0, the square of `dense_1/kernel`'s gradient in
Adam's update, placed at the optimizer's line; the mixed policy (a patch of the policy
line, proved by a patched copy run from the start) and clipping each value are fixes.
"""

import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("float16")
keras.utils.set_random_seed(7)

readings = np.random.uniform(0.0, 40.0, size=(512, 6)).astype("float32")
target = readings @ np.linspace(0.5, 1.5, 6).astype("float32")[:, None] / 3.0

inputs = keras.Input((6,))
hidden = keras.layers.Dense(16, activation="relu")(inputs)
outputs = keras.layers.Dense(1)(hidden)
model = keras.Model(inputs, outputs)
optimizer = keras.optimizers.Adam(learning_rate=1e-2)
data = tf.data.Dataset.from_tensor_slices((readings, target)).batch(32)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        prediction = tf.cast(model(x, training=True), tf.float32)
        loss = tf.reduce_mean(tf.square(prediction - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


losses = []
for _epoch in range(8):
    for x, y in data:
        loss = train_step(x, y)
    losses.append(float(loss))
print("losses", [value.hex() for value in losses])
print("weights", [float(np.sum(w.numpy(), dtype=np.float64)).hex() for w in model.weights])
