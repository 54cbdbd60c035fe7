"""The classic Keras 2 GAN recipe run on Keras 3: the discriminator is compiled, then
frozen to compile the combined model, before its own first `train_on_batch`.

Keras 3 reads `trainable` when a model's train step is built, so the discriminator's
own step trains nothing: Keras only warns, and its weights never move.
"""

import keras
import numpy as np

keras.utils.set_random_seed(4)
latent = 4
real = np.random.default_rng(4).normal(loc=3.0, scale=0.5, size=(512, 2)).astype("float32")

generator = keras.Sequential(
    [keras.Input((latent,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
)
discriminator = keras.Sequential(
    [
        keras.Input((2,)),
        keras.layers.Dense(8, activation="relu"),
        keras.layers.Dense(1, activation="sigmoid"),
    ],
    name="critic",
)
discriminator.compile(optimizer="adam", loss="binary_crossentropy")

discriminator.trainable = False
noise = keras.Input((latent,))
combined = keras.Model(noise, discriminator(generator(noise)))
combined.compile(optimizer="adam", loss="binary_crossentropy")

rng = np.random.default_rng(5)
before = [w.copy() for w in discriminator.get_weights()]
for _ in range(6):
    z = rng.normal(size=(32, latent)).astype("float32")
    fake = generator.predict_on_batch(z)
    batch = np.concatenate([real[rng.integers(0, 512, 32)], fake])
    labels = np.concatenate([np.ones((32, 1)), np.zeros((32, 1))]).astype("float32")
    discriminator.train_on_batch(batch, labels)
    combined.train_on_batch(z, np.ones((32, 1), "float32"))
moved = sum(float(np.abs(a - b).sum()) for a, b in zip(discriminator.get_weights(), before))
print("discriminator weights moved:", moved)
