"""A hand-written loop over Keras's own `train_step`, compiled with `tf.function`: the
step function is the library's, not the script's, so no step wrapper reads the guard.

One label of batch 5 is NaN, so the loss of step 5 is NaN: the guard skips that update
and, its latch closed, every update after it.

Expected: category=unlocated_nonfinite step=5; the explanation says the update of step 5 and the
2 after it were skipped (found at the end of the run).
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(2)
features = np.random.randn(128, 3).astype("float32")
labels = np.random.randn(128, 1).astype("float32")
labels[5 * 16 + 1] = np.nan

model = keras.Sequential([keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
step = tf.function(model.train_step)
for start in range(0, 128, 16):
    step((features[start : start + 16], labels[start : start + 16]))
print("weights finite:", all(np.isfinite(w).all() for w in model.get_weights()))
