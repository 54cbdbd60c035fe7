"""A token model in Keras's functional style whose padding tokens' embeddings are zeroed by
a mask, then normalised by `LayerNormalization(epsilon=0.0)`: a row of zeros has variance
0, and Keras 3 computes the layer as rsqrt(var + epsilon), inf. The layer's own line gets
the patch."""

import keras
import numpy as np
from keras import layers

keras.utils.set_random_seed(11)
rng = np.random.default_rng(11)
V, T = 50, 10
tokens = rng.integers(1, V, size=(1024, T))
tokens[:, 7:] = 0  # padding
y = (tokens[:, 0] > V // 2).astype("int32")

inp = keras.Input((T,), dtype="int32")
e = layers.Embedding(V, 16, embeddings_initializer="uniform")(inp)
# padding token's embedding zeroed by a mask multiply
m = layers.Lambda(lambda t: keras.ops.cast(keras.ops.not_equal(t, 0), "float32")[..., None])(inp)
e = layers.Multiply()([e, m])
h = layers.LayerNormalization(epsilon=0.0)(e)
h = layers.Dense(16, activation="relu")(h)
h = layers.GlobalAveragePooling1D()(h)
out = layers.Dense(2)(h)
model = keras.Model(inp, out)
model.compile(
    "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]
)
h = model.fit(tokens, y, epochs=2, batch_size=64, verbose=2)
print(h.history["loss"])
