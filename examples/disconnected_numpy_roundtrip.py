"""Churn classifier trained with a NumPy loss: every gradient is `None`.

The user's evaluation code already has a class-weighted log loss written in NumPy
(`weighted_log_loss`), so their custom eager `tf.GradientTape` loop reuses it: inside
the tape it takes the predicted probabilities out of TensorFlow with `pred.numpy()`,
clips them away from 0 and 1, computes the loss in NumPy and wraps the result in
`tf.constant` for the tape. The loss value is right, but the tape only records
TensorFlow ops: the NumPy round trip leaves it, and the new constant has no history,
so `tape.gradient` returns `None` for all 6 trainable variables (3 Dense layers, kernel
and bias each).

Run plainly, the loss of the first batch is computed, then `optimizer.apply_gradients`
raises Keras's `ValueError: No gradients provided for any variable.` (expected: no step
is applied).

Expected: category=disconnected_gradients variables=6 all=true op=numpy round trip
(`.numpy()`) line="probs = np.clip(pred.numpy(), EPS, 1.0 - EPS)"
"""

import keras
import numpy as np
import tensorflow as tf

NUM_CUSTOMERS = 1024
NUM_FEATURES = 10
BATCH_SIZE = 64
EPOCHS = 3
EPS = 1e-6
CHURN_WEIGHT = 3.0  # churners are rare and costly


def make_customers(rng):
    """Usage features and a churn label (about one customer in five churns)."""
    x = rng.normal(size=(NUM_CUSTOMERS, NUM_FEATURES)).astype("float32")
    score = x[:, 0] - 0.8 * x[:, 1] + 0.5 * x[:, 2] * x[:, 3] - 1.2
    churn = (score + 0.5 * rng.normal(size=NUM_CUSTOMERS) > 0).astype("float32")
    return x, churn[:, None]


def weighted_log_loss(probs, labels):
    """Class-weighted binary log loss, as in the evaluation notebook."""
    weights = np.where(labels == 1.0, CHURN_WEIGHT, 1.0)
    losses = -(labels * np.log(probs) + (1.0 - labels) * np.log(1.0 - probs))
    return float(np.sum(weights * losses) / np.sum(weights))


def build_model():
    return keras.Sequential(
        [
            keras.Input((NUM_FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )


def main():
    keras.utils.set_random_seed(3)
    x, churn = make_customers(np.random.default_rng(3))
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, churn))
        .shuffle(NUM_CUSTOMERS, seed=3)
        .batch(BATCH_SIZE)
    )
    model = build_model()
    optimizer = keras.optimizers.Adam(1e-3)

    for epoch in range(EPOCHS):
        for step, (features, labels) in enumerate(dataset):
            with tf.GradientTape() as tape:
                pred = model(features, training=True)
                probs = np.clip(pred.numpy(), EPS, 1.0 - EPS)
                loss = tf.constant(weighted_log_loss(probs, labels.numpy()))
            if step == 0:
                print(f"epoch {epoch}: loss={float(loss):.4f}")
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))


if __name__ == "__main__":
    main()
