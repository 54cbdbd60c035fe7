"""A Keras functional model whose author turned on `tf.debugging.enable_check_numerics()`
to find a NaN, as TensorFlow's debugging guide says to. A custom layer scales each row by
its own norm, and a block of all-zero rows (padding left in the data) has norm 0.
Without the doctor the run stops with a stack trace at the first NaN; under it, check
numerics stays off and the doctor names the op (its own reads of the failing step's
values would otherwise stop it first)."""

import keras
import numpy as np
import tensorflow as tf

tf.debugging.enable_check_numerics()


class RowNormalize(keras.layers.Layer):
    def call(self, rows):
        return rows / tf.norm(rows, axis=-1, keepdims=True)


keras.utils.set_random_seed(0)
features = np.random.default_rng(0).normal(size=(384, 10)).astype("float32")
labels = (features[:, 0] > 0).astype("float32")
features[320:352] = 0.0  # padding rows

inputs = keras.Input((10,))
hidden = keras.layers.Dense(16, activation="relu")(RowNormalize()(inputs))
outputs = keras.layers.Dense(1, activation="sigmoid")(hidden)
model = keras.Model(inputs, outputs)
model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(features, labels, batch_size=32, epochs=2, shuffle=False, verbose=2)
