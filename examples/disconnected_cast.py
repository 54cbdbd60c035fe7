"""House-price regressor whose first two layers never train: an integer cast in the middle.

To make the model "ready for int8 inference", the user adds a custom `Quantize` layer
after the second hidden layer: it scales the activations by 8, casts them to `int32`
(rounding towards zero) and casts them back to float. A cast to an integer dtype has no
gradient, so the path from the loss back to the two Dense layers before the cast is cut:
their 4 trainable variables (2 kernels, 2 biases) get `None` gradients and keep their
initial values for the whole run. The 2 Dense layers after the cast (4 variables) still
get gradients, so the loss does go down a little and nothing crashes: `model.fit` only
prints a warning once, while the train step is traced.

Run plainly, Keras warns
`UserWarning: Gradients do not exist for variables ['hidden_1/kernel', 'hidden_1/bias',
'hidden_2/kernel', 'hidden_2/bias'] when minimizing the loss. If using `model.compile()`,
did you forget to provide a `loss` argument?` and training finishes (5 epochs).

Expected: category=disconnected_gradients variables=4 all=false op=Cast
line="steps = tf.cast(h * 8.0, tf.int32)"
"""

import keras
import numpy as np
import tensorflow as tf

NUM_HOUSES = 2048
NUM_FEATURES = 6
BATCH_SIZE = 64
EPOCHS = 5


def make_houses(rng):
    """Standardised features (area, rooms, age, ...) and a price in units of 100k."""
    x = rng.normal(size=(NUM_HOUSES, NUM_FEATURES)).astype("float32")
    weights = np.array([1.5, 0.8, -0.6, 0.3, 0.0, 0.4], dtype="float32")
    price = 3.0 + x @ weights + 0.3 * np.tanh(x[:, 0] * x[:, 1])
    price += 0.1 * rng.normal(size=NUM_HOUSES)
    return x, price[:, None].astype("float32")


class Quantize(keras.layers.Layer):
    """Snaps activations to a grid of 1/8, as int8 inference would."""

    def call(self, h):
        steps = tf.cast(h * 8.0, tf.int32)
        return tf.cast(steps, tf.float32) / 8.0


def build_model():
    features = keras.Input((NUM_FEATURES,), name="features")
    h = keras.layers.Dense(32, activation="relu", name="hidden_1")(features)
    h = keras.layers.Dense(16, activation="relu", name="hidden_2")(h)
    h = Quantize(name="quantize")(h)
    h = keras.layers.Dense(16, activation="relu", name="hidden_3")(h)
    price = keras.layers.Dense(1, name="price")(h)
    return keras.Model(features, price)


def main():
    keras.utils.set_random_seed(2)
    x, price = make_houses(np.random.default_rng(2))
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    history = model.fit(x, price, batch_size=BATCH_SIZE, epochs=EPOCHS, verbose=2)
    print("final loss:", history.history["loss"][-1])


if __name__ == "__main__":
    main()
