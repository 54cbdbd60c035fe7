"""Small GAN on a 2-D ring of Gaussians, one tape per step: healthy.

A dense generator maps 4-D noise to points in the plane; a dense discriminator tells
them from samples of a ring of 8 Gaussians. Each iteration runs a discriminator step
(its own tape, only `discriminator.trainable_variables` to `d_optimizer`) and then a
generator step (its own tape): the generator's points go through the discriminator, so
the tape sees the discriminator's variables too, but only
`generator.trainable_variables` are passed to `g_optimizer`. The discriminator's
variables are used but intentionally not trained in the generator step and must not be
flagged; the generator's output is continuous, so all 6 of its variables get gradients
(unlike story 4, where an argmax cuts the path).

Run plainly, training runs to the end without warnings and prints both losses.

Expected: category=healthy
"""

import keras
import numpy as np
import tensorflow as tf

NOISE_DIM = 4
NUM_POINTS = 4096
BATCH_SIZE = 128
STEPS = 300


def sample_ring(rng, n):
    """Points from 8 Gaussians evenly spaced on a circle of radius 2."""
    angles = 2 * np.pi * rng.integers(8, size=n) / 8
    centres = 2.0 * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    return (centres + 0.05 * rng.normal(size=(n, 2))).astype("float32")


def build_generator():
    return keras.Sequential(
        [
            keras.Input((NOISE_DIM,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(2),
        ],
        name="generator",
    )


def build_discriminator():
    return keras.Sequential(
        [
            keras.Input((2,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1),
        ],
        name="discriminator",
    )


def main():
    keras.utils.set_random_seed(8)
    real_points = sample_ring(np.random.default_rng(8), NUM_POINTS)
    dataset = (
        tf.data.Dataset.from_tensor_slices(real_points)
        .shuffle(NUM_POINTS, seed=8)
        .batch(BATCH_SIZE, drop_remainder=True)
        .repeat()
    )
    generator = build_generator()
    discriminator = build_discriminator()
    g_optimizer = keras.optimizers.Adam(1e-3, beta_1=0.5)
    d_optimizer = keras.optimizers.Adam(1e-3, beta_1=0.5)
    cross_entropy = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function
    def discriminator_step(real):
        noise = tf.random.normal((BATCH_SIZE, NOISE_DIM))
        with tf.GradientTape() as disc_tape:
            fake = generator(noise, training=True)
            real_logits = discriminator(real, training=True)
            fake_logits = discriminator(fake, training=True)
            d_loss = cross_entropy(tf.ones_like(real_logits), real_logits) + cross_entropy(
                tf.zeros_like(fake_logits), fake_logits
            )
        d_grads = disc_tape.gradient(d_loss, discriminator.trainable_variables)
        d_optimizer.apply_gradients(zip(d_grads, discriminator.trainable_variables))
        return d_loss

    @tf.function
    def generator_step():
        noise = tf.random.normal((BATCH_SIZE, NOISE_DIM))
        with tf.GradientTape() as gen_tape:
            fake_logits = discriminator(generator(noise, training=True), training=True)
            g_loss = cross_entropy(tf.ones_like(fake_logits), fake_logits)
        g_grads = gen_tape.gradient(g_loss, generator.trainable_variables)
        g_optimizer.apply_gradients(zip(g_grads, generator.trainable_variables))
        return g_loss

    for step, real in enumerate(dataset.take(STEPS)):
        d_loss = discriminator_step(real)
        g_loss = generator_step()
        if step % 100 == 0 or step == STEPS - 1:
            print(f"step {step}: d_loss={float(d_loss):.4f} g_loss={float(g_loss):.4f}")


if __name__ == "__main__":
    main()
