"""A healthy custom training loop: nothing should be reported.

A subclassed `keras.Model` (a small residual MLP regressor) trained with a
hand-written `@tf.function` step: `tf.GradientTape`, then `optimizer.apply_gradients`,
over a `tf.data` dataset for a few epochs. Inputs and targets are standardized and
the learning rate is modest, so losses, gradients and weights stay finite and well
scaled; a diagnosis tool watching this run should stay quiet.

Expected: healthy
"""

import keras
import numpy as np
import tensorflow as tf

NUM_SAMPLES = 2048
NUM_FEATURES = 8
BATCH_SIZE = 64
EPOCHS = 5


def make_data(rng):
    """Standardized features and a smooth, standardized nonlinear target."""
    x = rng.normal(size=(NUM_SAMPLES, NUM_FEATURES))
    y = np.tanh(x[:, :1] * x[:, 1:2]) + 0.5 * np.cos(x[:, 2:3])
    y = (y - y.mean()) / y.std()
    return x.astype("float32"), y.astype("float32")


class ResidualRegressor(keras.Model):
    """Dense input projection, two residual blocks, linear output."""

    def __init__(self, width=32, **kwargs):
        super().__init__(**kwargs)
        self.project = keras.layers.Dense(width, activation="relu")
        self.blocks = [keras.layers.Dense(width, activation="relu") for _ in range(2)]
        self.out = keras.layers.Dense(1)

    def call(self, x, training=False):
        h = self.project(x)
        for block in self.blocks:
            h = h + block(h)  # residual connections keep gradients well scaled
        return self.out(h)


def main():
    keras.utils.set_random_seed(5)
    x, y = make_data(np.random.default_rng(5))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(NUM_SAMPLES, seed=5)
    dataset = dataset.batch(BATCH_SIZE)

    model = ResidualRegressor()
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.MeanSquaredError()

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for epoch in range(EPOCHS):
        total, batches = 0.0, 0
        for x_batch, y_batch in dataset:
            total += float(train_step(x_batch, y_batch))
            batches += 1
        print(f"epoch {epoch}: mean loss {total / batches:.4f}")


if __name__ == "__main__":
    main()
