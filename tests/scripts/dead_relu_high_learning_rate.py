"""A ReLU regressor trained with Adam at learning_rate=0.5 (a rate meant for another
problem, copied over): the first updates move every weight by about 0.5, the loss
jumps by five orders of magnitude at step 1, and after the next update every ReLU of
the second hidden layer outputs 0 for every example. From then on no gradient passes
back through that layer: the first two layers and the output kernel get exactly zero
gradient, the model predicts a constant and never learns again. Nothing is ever
non-finite, and no op on the path to the loss is broken.

Expected: category=dead_units (not disconnected_gradients) naming the dead layer
`sequential/dense_1`, the huge update before it and the learning rate 0.5; exit 1.
"""

import keras
import numpy as np

keras.utils.set_random_seed(3)
rng = np.random.default_rng(3)
x = rng.normal(size=(3200, 8)).astype("float32")
y = (np.tanh(x[:, :1]) + 2.0).astype("float32")

model = keras.Sequential(
    [
        keras.Input((8,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.5), loss="mse")
history = model.fit(x, y, batch_size=32, epochs=2, verbose=0)
print("loss per epoch:", [round(v, 4) for v in history.history["loss"]])
