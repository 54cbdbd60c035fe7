"""Layers that make their sub-layers and weights in `build`, inside a subclassed model
with no `Input` and no `train_step` of its own: nothing exists until fit's first step
calls the model (and RMSprop makes its slots at the first update).

The first block scales its input by a log-compressed feature, log(x[:, 0]). Run plainly,
every feature is positive and training is healthy. With `--nan`, one row of batch 4 holds
a negative value there, and log of a negative number is NaN in the forward pass.

Expected (with --nan): category=forward_domain op=Log phase=forward step=4
(on the tf.math.log line)
"""

import argparse
import hashlib
import json

import keras
import numpy as np
import tensorflow as tf


class LogScaledBlock(keras.layers.Layer):
    """A dense block whose sub-layer and gain exist only once the input shape is known."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.dense = keras.layers.Dense(self.units, activation="tanh")
        self.dense.build(input_shape)
        self.gain = self.add_weight(shape=(self.units,), initializer="ones", name="gain")

    def call(self, inputs):
        scale = tf.math.log(inputs[:, :1])
        return self.dense(inputs) * self.gain * (1.0 + 0.1 * scale)


class Stack(keras.Model):
    def __init__(self):
        super().__init__()
        self.first = LogScaledBlock(16)
        self.second = LogScaledBlock(8)
        self.out = keras.layers.Dense(1)

    def call(self, inputs):
        hidden = self.first(inputs)
        return self.out(self.second(tf.abs(hidden) + 1.0))


def make_data(poisoned):
    rng = np.random.default_rng(4)
    features = rng.uniform(0.5, 2.0, size=(256, 6)).astype("float32")
    targets = features @ rng.normal(size=(6, 1)).astype("float32")
    if poisoned:
        features[4 * 16 + 3, 0] = -1.0
    return features, targets


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nan", action="store_true")
    args = parser.parse_args()
    keras.utils.set_random_seed(1)
    features, targets = make_data(args.nan)
    model = Stack()
    model.compile(optimizer=keras.optimizers.RMSprop(1e-3), loss="mse")
    history = model.fit(features, targets, batch_size=16, epochs=2, shuffle=False, verbose=0)
    digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights()))
    result = {"losses": history.history["loss"], "weights": digest.hexdigest()}
    print("RESULT", json.dumps(result))


if __name__ == "__main__":
    main()
