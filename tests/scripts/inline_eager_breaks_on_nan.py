# A variational autoencoder's training cell from a notebook: the encoder's variance
# head is a relu, the KL term takes its log, and the loop quietly stops on a NaN loss.
import numpy as np
import tensorflow as tf
from tensorflow.keras import layers

tf.keras.utils.set_random_seed(7)
rng = np.random.default_rng(7)
images = rng.uniform(size=(256, 16)).astype("float32")

encoder = tf.keras.Sequential([layers.Dense(24, activation="relu"), layers.Dense(8)])
variance_head = layers.Dense(
    4, activation="relu", kernel_initializer="zeros", bias_initializer="ones"
)
decoder = tf.keras.Sequential([layers.Dense(24, activation="relu"), layers.Dense(16)])
optimizer = tf.keras.optimizers.Adam(0.03)

for step in range(40):
    batch = images[(step * 32) % 256 : (step * 32) % 256 + 32]
    with tf.GradientTape() as tape:
        hidden = encoder(batch)
        mean, variance = hidden[:, :4], variance_head(hidden)
        z = mean + tf.sqrt(variance) * tf.random.normal(tf.shape(mean))
        reconstruction = decoder(z)
        kl = -0.5 * tf.reduce_mean(1 + tf.math.log(variance) - mean**2 - variance)
        loss = tf.reduce_mean(tf.square(reconstruction - batch)) + 0.01 * kl
    if not np.isfinite(float(loss)):
        print("loss is not finite, stopping")
        break
    weights = [*encoder.trainable_variables, *variance_head.trainable_variables]
    weights += decoder.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
    print(f"step {step} loss {float(loss):.4f}")
