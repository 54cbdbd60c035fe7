"""An inline eager loop (module level) that pulls its batches from a `tf.data` iterator.

A regressor with dropout, trained on a mean squared log error written by hand:
log(prediction + 1) of a linear output. The learning rate is high enough that some
predictions fall below -1, where the log's argument is negative. The failing step's
dropout mask decides which predictions those are.

Expected: category=forward_domain op=Log phase=forward step=13 (the `log_error = ...` line)
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(4)
rng = np.random.default_rng(4)
x = rng.normal(size=(256, 8)).astype("float32")
y = np.exp(x[:, :1] * 0.5).astype("float32")  # positive targets, as MSLE expects
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=4).batch(32)
iterator = iter(dataset.repeat())

model = keras.Sequential(
    [
        keras.Input((8,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(1, bias_initializer=keras.initializers.Constant(2.0)),
    ]
)
optimizer = keras.optimizers.Adam(learning_rate=0.08)

for step in range(20):
    features, targets = next(iterator)
    with tf.GradientTape() as tape:
        prediction = model(features, training=True)
        log_error = tf.math.log(prediction + 1.0) - tf.math.log(targets + 1.0)
        loss = tf.reduce_mean(tf.square(log_error))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    print(f"step {step} loss {float(loss):.4f}")
