"""A regression trained with an optimizer built from command-line values, in an eager-free
`tf.function` loop, whose learning rate is just past what the problem can take.

The updates overshoot by a little more every step: the loss creeps up for about a hundred
steps before the predictions overflow float32 in the squared error. Expected: exploding
gradients; a lower learning rate, written as a patch of the user's own
`SGD(args.lr, momentum=args.momentum)` call (`args.lr * 0.1`), tried from before the
growth began, verified, and the patched script trains healthy.

Run it as `argparse_slow_explosion.py --lr 0.048 --momentum 0.5` (the defaults).
"""

import argparse

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.048)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--steps", type=int, default=300)
args = parser.parse_args()

tf.random.set_seed(1)
rng = np.random.default_rng(1)
x = rng.normal(size=(256, 8)).astype("float32") * np.linspace(1, 6, 8, dtype="float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")

w = tf.Variable(tf.zeros((8, 1)))
b = tf.Variable(tf.zeros((1,)))
optimizer = tf.keras.optimizers.SGD(args.lr, momentum=args.momentum)


@tf.function
def step(features, targets):
    with tf.GradientTape() as tape:
        prediction = tf.matmul(features, w) + b
        loss = tf.reduce_mean(tf.square(prediction - targets))
    grads = tape.gradient(loss, [w, b])
    optimizer.apply_gradients(zip(grads, [w, b]))
    return loss


for index in range(args.steps):
    start = (index * 32) % 256
    loss = step(x[start : start + 32], y[start : start + 32])
    if index % 20 == 0:
        print(f"step {index}: loss {float(loss):.4g}")
