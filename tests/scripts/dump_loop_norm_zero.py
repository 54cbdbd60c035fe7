"""A custom tf.function loop whose loss takes `tf.norm` of a vector that is exactly zero.

The embedding has no bias, so the all-zero row of the fourth batch embeds to the zero
vector: its norm is a finite 0, but the gradient of the norm there is x / ||x|| =
0 / 0, so the backward pass turns NaN at step 3.

Expected: category=backward_singularity op=SqrtGrad gradient_of=Sqrt phase=backward
(the tf.norm line)
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(7)
rng = np.random.default_rng(7)
batches = [rng.normal(size=(16, 5)).astype("float32") for _ in range(6)]
batches[3][9] = 0.0
embed = keras.layers.Dense(3, use_bias=False)
optimizer = keras.optimizers.Adam(0.01)


@tf.function
def train_step(batch):
    with tf.GradientTape() as tape:
        lengths = tf.norm(embed(batch), axis=-1)
        loss = tf.reduce_mean(tf.square(lengths - 1.0))
    grads = tape.gradient(loss, embed.trainable_variables)
    optimizer.apply_gradients(zip(grads, embed.trainable_variables))
    return loss


for batch in batches:
    print("loss", float(train_step(tf.constant(batch))))
