"""A custom tf.function loop with a hinge that pushes each row's distance, sqrt(sum(z^2)),
out to a margin of 1.

Rows already past the margin give the hinge a zero gradient, so the incoming gradient
of the sqrt holds many zeros (one per such row). At step 3 four rows of the batch are
exactly zero: their distance is a finite 0, but the gradient of sqrt there is
0.5 / sqrt(0) = inf, and the update turns NaN.

Expected: category=backward_singularity op=SqrtGrad gradient_of=Sqrt phase=backward step=3
(the `distance = tf.sqrt(...)` line); the explanation counts the 4 zero distances, not
the zeros of the incoming gradient.
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(3)
rng = np.random.default_rng(3)
batches = [rng.normal(scale=0.6, size=(32, 4)).astype("float32") for _ in range(40)]
batches[3][[2, 9, 17, 30]] = 0.0
project = keras.layers.Dense(4, use_bias=False, kernel_initializer="identity")
optimizer = keras.optimizers.SGD(0.05)


@tf.function
def train_step(points):
    with tf.GradientTape() as tape:
        distance = tf.sqrt(tf.reduce_sum(tf.square(project(points)), axis=1))
        loss = tf.reduce_mean(tf.nn.relu(1.0 - distance))
    grads = tape.gradient(loss, project.trainable_variables)
    optimizer.apply_gradients(zip(grads, project.trainable_variables))
    return loss


print("training", flush=True)
for step, batch in enumerate(batches):
    print(f"step {step} loss {float(train_step(tf.constant(batch))):.4f}", flush=True)
