"""A healthy inline eager loop (module level): tf.data batches, dropout, batch norm, Adam.

Every step prints its loss exactly (float.hex) and a digest of every weight (moving
statistics and the dropout seed included), so a test can compare a run under the
doctor with a plain run bit for bit.

Expected: healthy, 12 steps watched, output identical to `python` on the script
"""

import hashlib

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(5)
rng = np.random.default_rng(5)
x = rng.normal(size=(192, 10)).astype("float32")
y = (x @ rng.normal(size=(10, 1))).astype("float32")
batches = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(192, seed=5).batch(16)

model = keras.Sequential(
    [
        keras.Input((10,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.Dropout(0.25),
        keras.layers.Dense(1),
    ]
)
optimizer = keras.optimizers.Adam(learning_rate=1e-2)

for step, (features, targets) in enumerate(batches):
    with tf.GradientTape() as tape:
        prediction = model(features, training=True)
        loss = tf.reduce_mean(tf.square(prediction - targets))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    digest = hashlib.sha256(b"".join(w.numpy().tobytes() for w in model.weights)).hexdigest()
    print(f"step {step} loss {float(loss).hex()} weights {digest[:24]}")
