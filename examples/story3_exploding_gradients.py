"""A deep plain MLP whose gradients explode under a learning rate that is too high.

Story 3 of gradient-doctor: a 10-layer ReLU MLP with no normalization, trained with
plain SGD in a hand-written `@tf.function` step (`tf.GradientTape` +
`optimizer.apply_gradients`) over a `tf.data` dataset. The learning rate is too high
for this depth: every update overshoots, the weights grow, and the gradient norm
grows by orders of magnitude over a few dozen steps until a value overflows float32.

Expected: category=exploding_gradients op=TBD phase=TBD line=0
"""

import keras
import numpy as np
import tensorflow as tf

NUM_SAMPLES = 4096
NUM_FEATURES = 20
DEPTH = 10
WIDTH = 64
BATCH_SIZE = 64
EPOCHS = 5
LEARNING_RATE = 0.05  # too high for a deep net without normalization


def make_data(rng):
    """A smooth nonlinear regression target of 20 features."""
    x = rng.normal(size=(NUM_SAMPLES, NUM_FEATURES)).astype("float32")
    w = rng.normal(size=(NUM_FEATURES, 1))
    y = np.sin(x @ w) + 0.1 * (x**2).sum(axis=1, keepdims=True)
    return x, y.astype("float32")


def build_model():
    layers = [keras.Input((NUM_FEATURES,))]
    layers += [keras.layers.Dense(WIDTH, activation="relu") for _ in range(DEPTH - 1)]
    layers += [keras.layers.Dense(1)]
    return keras.Sequential(layers)


def main():
    keras.utils.set_random_seed(3)
    x, y = make_data(np.random.default_rng(3))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(NUM_SAMPLES, seed=3)
    dataset = dataset.batch(BATCH_SIZE)

    model = build_model()
    optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE)
    loss_fn = keras.losses.MeanSquaredError()

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            loss = loss_fn(y, pred)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, tf.linalg.global_norm(grads)

    step = 0
    for epoch in range(EPOCHS):
        for x_batch, y_batch in dataset:
            loss, grad_norm = train_step(x_batch, y_batch)
            loss, grad_norm = float(loss), float(grad_norm)
            if step % 10 == 0 or not np.isfinite(loss):
                print(f"epoch {epoch} step {step}: loss {loss:.4g}, gradient norm {grad_norm:.4g}")
            if not np.isfinite(loss):
                print("loss is not finite, stopping")
                return
            step += 1
    print("finished, final loss", loss)


if __name__ == "__main__":
    main()
