"""A deep plain MLP whose gradients explode under a learning rate that is too high.

Story 3 of gradient-doctor: a 10-layer ReLU MLP with no normalization, trained with
plain SGD in a hand-written `@tf.function` step (`tf.GradientTape` +
`optimizer.apply_gradients`) over a `tf.data` dataset. The learning rate warms up
linearly to a peak of 2.0, far too high for this depth. Training is fine until the
learning rate passes ~1.0 (around step 205); from then on every update overshoots,
the weights grow, and the gradient norm grows ~25% per step: ~1 at step 205, ~10 at
step 220, ~100 at step 230, ~700 at step 236, ~70000 at step 237. That last update
blows the weights up, and at step 238 the predictions are so large that squaring the
error in the mean-squared-error loss overflows float32 to inf (the loss is inf, the
gradients NaN). The loss is only where the overflow shows; the cause is the
learning rate (gradient clipping or a lower learning rate would help here).

Expected: category=exploding_gradients op=Square phase=forward line=68
"""

import keras
import numpy as np
import tensorflow as tf

NUM_SAMPLES = 4096
NUM_FEATURES = 20
DEPTH = 10
WIDTH = 64
BATCH_SIZE = 64
EPOCHS = 10
PEAK_LEARNING_RATE = 2.0  # too high for a deep net without normalization
WARMUP_STEPS = 400


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
    # Linear warmup from 0.01 to the peak learning rate, then a (very slow) cosine decay.
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.01,
        decay_steps=100_000,
        warmup_target=PEAK_LEARNING_RATE,
        warmup_steps=WARMUP_STEPS,
    )
    optimizer = keras.optimizers.SGD(learning_rate=schedule)
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
