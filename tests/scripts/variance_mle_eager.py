"""Maximum-likelihood fit of a sensor's offset and noise variance, written as a plain
eager loop at module level (no tf.function): the variance is a bare tf.Variable fed
straight into tf.sqrt, and momentum carries it below zero."""

import numpy as np
import tensorflow as tf

rng = np.random.default_rng(7)
readings = tf.constant(rng.normal(3.0, 0.2, size=(4096,)), dtype=tf.float32)

offset = tf.Variable(0.0)
variance = tf.Variable(1.0)
opt = tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)

for step in range(400):
    batch = readings[(step * 64) % 4096 : (step * 64) % 4096 + 64]
    with tf.GradientTape() as tape:
        std = tf.sqrt(variance)
        nll = tf.reduce_mean(tf.math.log(std) + 0.5 * tf.square((batch - offset) / std))
    grads = tape.gradient(nll, [offset, variance])
    opt.apply_gradients(zip(grads, [offset, variance]))
    if step % 50 == 0:
        print(step, float(nll), float(offset), float(variance))
