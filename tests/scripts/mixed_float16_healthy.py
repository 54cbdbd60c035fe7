"""mixed_float16 whose loss scale starts far too high: the first steps overflow, normally.

The LossScaleOptimizer skips each overflowing step and halves its scale, then trains.
Prints the losses, the final loss scale and the updates applied, exactly (float.hex).

Expected: healthy
"""

import keras
import numpy as np

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
x = np.random.randn(256, 8).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential(
    [
        keras.Input((8,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(1, dtype="float32"),
    ]
)
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01), initial_scale=2.0**20)
model.compile(optimizer=optimizer, loss="mse")
history = model.fit(x, y, batch_size=32, epochs=4, shuffle=False, verbose=0)
print("losses", [value.hex() for value in history.history["loss"]])
print("loss scale", float(optimizer.dynamic_scale.numpy()).hex())
print("updates applied", int(optimizer.iterations.numpy()))
print("weights", [float(np.sum(w.numpy(), dtype=np.float64)).hex() for w in model.weights])
