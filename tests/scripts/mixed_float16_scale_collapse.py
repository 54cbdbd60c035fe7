"""mixed_float16 regression on unnormalised targets with a summed loss.

The float16 gradients of the last layer pass 65504 at their true size: the
LossScaleOptimizer halves its scale on every step, from 2**15 down to 1 and below,
skipping every update (Keras 3 sets no floor).

Expected: category=loss_scale_collapse at step 15 (the scale reached 1)
"""

import keras
import numpy as np

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
x = np.random.randn(512, 8).astype("float32")
y = 1000.0 * x.sum(axis=1, keepdims=True)
model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
model.compile(
    optimizer=keras.optimizers.SGD(1e-6), loss=keras.losses.MeanSquaredError(reduction="sum")
)
model.fit(x, y, batch_size=64, epochs=4, shuffle=False, verbose=0)
