"""Fit a damped oscillator's physical parameters and the measurement noise level by
maximum likelihood, custom GradientTape loop (synthetic sensor trace)."""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(2)

t = np.linspace(0, 10, 2000).astype("float32")
y_obs = (
    1.5 * np.exp(-0.3 * t) * np.cos(2.1 * t) + np.random.normal(scale=0.05, size=t.shape)
).astype("float32")

amp = tf.Variable(1.0, name="amplitude")
damping = tf.Variable(0.1, name="damping")
omega = tf.Variable(2.0, name="omega")
noise_var = tf.Variable(1.0, name="noise_variance")
params = [amp, damping, omega, noise_var]
optimizer = keras.optimizers.SGD(learning_rate=0.05, momentum=0.9)

ds = tf.data.Dataset.from_tensor_slices((t, y_obs)).shuffle(2000, seed=2).batch(100)


def model(tb):
    return amp * tf.exp(-damping * tb) * tf.cos(omega * tb)


@tf.function
def train_step(tb, yb):
    with tf.GradientTape() as tape:
        sigma = tf.sqrt(noise_var)
        resid = (yb - model(tb)) / sigma
        nll = tf.reduce_mean(tf.math.log(sigma) + 0.5 * tf.square(resid))
    grads = tape.gradient(nll, params)
    optimizer.apply_gradients(zip(grads, params))
    return nll


for epoch in range(15):
    for tb, yb in ds:
        nll = train_step(tb, yb)
    print(
        f"epoch {epoch}: nll {float(nll):.4f}  A={float(amp):.3f} gamma={float(damping):.3f} "
        f"omega={float(omega):.3f} noise_var={float(noise_var):.5f}"
    )
