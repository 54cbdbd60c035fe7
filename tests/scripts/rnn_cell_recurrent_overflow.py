"""A ReLU SimpleRNN whose recurrent kernel is 12 times orthogonal: its state explodes.

Over 50 time steps the state is multiplied by up to 12 each step, and the cell's
MatMul overflows float32 inside the recurrent loop at step 0. Expected:
forward_overflow, op MatMul in layer `sequential/simple_rnn/simple_rnn_cell`, the origin
at the line that created the SimpleRNN (source_kind layer_creation).
"""

import keras
import numpy as np

keras.utils.set_random_seed(1)
x = np.random.default_rng(0).normal(size=(64, 50, 4)).astype("float32")
y = np.random.default_rng(1).normal(size=(64, 1)).astype("float32")

recurrent = keras.layers.SimpleRNN(
    16, activation="relu", recurrent_initializer=keras.initializers.Orthogonal(gain=12.0)
)
model = keras.Sequential([keras.Input((50, 4)), recurrent, keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mae")
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
