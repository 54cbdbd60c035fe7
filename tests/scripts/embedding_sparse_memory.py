"""A 2,000,000 x 16 embedding table trained for a few steps: its gradients are sparse.

Only the rows a batch looks up get a gradient (an `IndexedSlices`), so a step should
not need memory on the scale of the table (128 MB). After a one-step warm-up fit
(which traces the step), TensorFlow's CPU allocator statistics are reset and a second
fit runs; the script prints how far the allocator's peak rose above the memory in use
before it. The statistics need TensorFlow's BFC allocator on the CPU: run with
TF_CPU_ALLOCATOR_USE_BFC=true in the environment.

`--lookup` looks rows up with `tf.nn.embedding_lookup` on the variable itself (a
sparse read): then the update needs no copy of the table, unlike `keras.layers.
Embedding`, whose full reads make TensorFlow copy the table once per update (the
same with or without the doctor). `--densify` turns each gradient into a dense tensor
before the update: a control that shows what a dense gradient of the table costs.

Expected: healthy
"""

import sys

import keras
import numpy as np
import tensorflow as tf

VOCABULARY, WIDTH = 2_000_000, 16


class Lookup(keras.layers.Layer):
    """An embedding table read row by row (a sparse read of the variable)."""

    def build(self, input_shape):
        self.table = self.add_weight(shape=(VOCABULARY, WIDTH), initializer="zeros")

    def call(self, ids):
        return tf.nn.embedding_lookup(self.table.value, ids)


class DenseGradientSGD(keras.optimizers.SGD):
    """SGD that converts every gradient to a dense tensor first (the control)."""

    def apply(self, grads, trainable_variables=None):
        return super().apply([tf.convert_to_tensor(g) for g in grads], trainable_variables)


keras.utils.set_random_seed(0)
ids = np.random.randint(0, VOCABULARY, size=(512, 4))
y = np.random.randn(512, 1).astype("float32")
if "--lookup" in sys.argv:
    table = Lookup()
else:
    table = keras.layers.Embedding(VOCABULARY, WIDTH, embeddings_initializer="zeros")
model = keras.Sequential(
    [
        keras.Input((4,), dtype="int32"),
        table,
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(1),
    ]
)
optimizer = DenseGradientSGD(0.1) if "--densify" in sys.argv else keras.optimizers.SGD(0.1)
model.compile(optimizer=optimizer, loss="mse")
model.fit(ids[:32], y[:32], batch_size=32, epochs=1, verbose=0)  # traces the step
tf.config.experimental.reset_memory_stats("CPU:0")
before = tf.config.experimental.get_memory_info("CPU:0")["current"]
history = model.fit(ids, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
growth = tf.config.experimental.get_memory_info("CPU:0")["peak"] - before
print(f"peak growth during fit: {growth} bytes over {len(ids) // 32} steps")
print("final loss", history.history["loss"][-1].hex())
