"""A custom loop of four steps that ends with `sys.exit(STATUS)`, STATUS from argv.

`exit_with_status.py 3` calls sys.exit(3); a STATUS that is not a number is passed to
sys.exit as a message; `--nan-batch` puts a NaN in the second batch (bad_input at step 1;
under --keep-going the loop goes on to sys.exit).

Expected: the doctor's exit status is STATUS for a number other than 0, 1 for a message
(printed on stderr, as Python does), and for 0: 0 when healthy, 1 when a problem was
diagnosed.
"""

import sys

import keras
import numpy as np
import tensorflow as tf

status = sys.argv[1]
keras.utils.set_random_seed(2)
batches = [np.random.default_rng(i).normal(size=(8, 3)).astype("float32") for i in range(4)]
if "--nan-batch" in sys.argv:
    batches[1][4, 2] = np.nan
layer = keras.layers.Dense(1)
optimizer = keras.optimizers.SGD(0.1)


@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(layer(x) - 1.0))
    grads = tape.gradient(loss, layer.trainable_variables)
    optimizer.apply_gradients(zip(grads, layer.trainable_variables))
    return loss


for batch in batches:
    train_step(tf.constant(batch))
sys.exit(int(status) if status.lstrip("-").isdigit() else status)
