"""A custom loop that drops a batch whose loss is NaN and trains on
(`if tf.math.is_nan(loss): continue`), as GAN and RL code often does: without the doctor
the run ends with no error and a count nobody reads. The loss is a cosine similarity
written by hand; a batch with an all-zero embedding target divides 0 by 0."""

import numpy as np
import tensorflow as tf


def cosine_loss(predicted, target):
    dot = tf.reduce_sum(predicted * target, axis=1)
    norms = tf.norm(predicted, axis=1) * tf.norm(target, axis=1)
    return -tf.reduce_mean(dot / norms)


def main():
    tf.keras.utils.set_random_seed(3)
    rng = np.random.default_rng(3)
    features = rng.normal(size=(192, 8)).astype("float32")
    targets = rng.normal(size=(192, 4)).astype("float32")
    targets[96:128] = 0.0  # unlabelled rows left at zero
    data = tf.data.Dataset.from_tensor_slices((features, targets)).batch(32)
    model = tf.keras.Sequential(
        [tf.keras.layers.Dense(16, activation="tanh"), tf.keras.layers.Dense(4)]
    )
    optimizer = tf.keras.optimizers.Adam(0.01)
    dropped = 0
    for epoch in range(3):
        for x, y in data:
            with tf.GradientTape() as tape:
                loss = cosine_loss(model(x), y)
            if tf.math.is_nan(loss):
                dropped += 1
                continue
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        print(f"epoch {epoch} loss {float(loss):.4f} dropped {dropped}")


main()
