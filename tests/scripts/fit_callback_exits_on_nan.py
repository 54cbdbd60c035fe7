"""A Keras `fit` with the script's own callback that ends the process when the loss goes NaN
(`sys.exit(4)` in `on_train_batch_end`), as people write to stop a doomed job. A softmax
written by hand overflows under a learning rate too high. The doctor's check of the batch
must run before that callback exits: the op is named, and the script's status 4 comes
through."""

import math
import sys

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
features = np.random.default_rng(0).normal(size=(512, 8)).astype("float32") * 20
labels = (features[:, 0] > 0).astype("int32")


class ExpSoftmax(keras.layers.Layer):
    def call(self, logits):
        e = tf.exp(logits)
        return e / tf.reduce_sum(e, axis=1, keepdims=True)


class ExitOnNan(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if not math.isfinite(float(logs["loss"])):
            print("loss went NaN, exiting with 4")
            sys.exit(4)


inputs = keras.Input((8,))
hidden = keras.layers.Dense(32, activation="relu")(inputs)
outputs = ExpSoftmax()(keras.layers.Dense(2)(hidden))
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.SGD(1.5), loss="sparse_categorical_crossentropy")
model.fit(features, labels, batch_size=64, epochs=4, verbose=0, callbacks=[ExitOnNan()])
