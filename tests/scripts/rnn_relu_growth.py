"""SimpleRNN (relu, recurrent Orthogonal(gain=6)) over 60 steps: activations blow up in its loop.

The predictions reach 5e30 and the MSE's Square overflows at step 0; the doctor must say the
values grew in the recurrent cell, not blame the loss.
"""

import keras
import numpy as np

keras.utils.set_random_seed(4)
x = np.random.default_rng(0).normal(size=(128, 60, 8)).astype("float32")
y = np.random.default_rng(1).normal(size=(128, 1)).astype("float32")
model = keras.Sequential(
    [
        keras.Input((60, 8)),
        keras.layers.SimpleRNN(
            32, activation="relu", recurrent_initializer=keras.initializers.Orthogonal(gain=6.0)
        ),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
print("done")
