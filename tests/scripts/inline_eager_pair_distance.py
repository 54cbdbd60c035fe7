"""A siamese encoder trained by an inline eager loop (module level, no function).

The distance between the two embeddings of a pair is written by hand as
sqrt(sum(d**2)). The batch of step 4 holds a pair whose two sides are the same
example: the difference is exactly zero, the forward pass is finite (sqrt(0) = 0),
and the gradient of sqrt at 0 is infinite.

Expected: category=backward_singularity op=SqrtGrad gradient_of=Sqrt phase=backward
step=4 (the tf.sqrt line); the update of step 4 is skipped: the weights printed at exit
are those printed before step 4 (without the doctor they are NaN).
"""

import atexit
import hashlib

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(1)
encoder = keras.Sequential(
    [keras.Input((6,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(4)]
)
optimizer = keras.optimizers.SGD(learning_rate=0.05)
rng = np.random.default_rng(1)
anchors = rng.normal(size=(8, 16, 6)).astype("float32")
positives = (anchors + 0.1 * rng.normal(size=anchors.shape)).astype("float32")
positives[4, 5] = anchors[4, 5]  # a duplicated example: the pair is one point


def weights_digest():
    return hashlib.sha256(b"".join(w.numpy().tobytes() for w in encoder.weights)).hexdigest()


atexit.register(lambda: print(f"weights at exit {weights_digest()}"))

for step in range(8):
    print(f"weights before step {step} {weights_digest()}")
    with tf.GradientTape() as tape:
        difference = encoder(anchors[step]) - encoder(positives[step])
        distance = tf.sqrt(tf.reduce_sum(difference**2, axis=-1))
        loss = tf.reduce_mean(distance)
    grads = tape.gradient(loss, encoder.trainable_variables)
    optimizer.apply_gradients(zip(grads, encoder.trainable_variables))
    print(f"step {step} loss {float(loss):.4f}")
