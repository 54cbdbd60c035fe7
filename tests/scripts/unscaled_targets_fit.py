"""House prices regressed in dollars: a first Keras tutorial attempt, features scaled, targets not.

The features are a few units each; the prices are ~3e5. The squared error starts near
1e11 and its gradient scales with the error, so SGD's second update carries gradients
whose global norm's square overflows float32. The doctor should name the targets' scale
(exploding_gradients), put `normalize_target` first, standardise `y` on the `fit` line,
and prove the patch: the loss of the standardised targets falls.
"""

import keras
import numpy as np

rng = np.random.default_rng(0)
n = 2048
rooms = rng.uniform(1, 8, n)
area = rng.uniform(0.3, 3.0, n)  # thousands of square feet
age = rng.uniform(0, 1, n)
x = np.stack([rooms, area, age], axis=1).astype("float32")
price = 50_000 * rooms + 120_000 * area - 30_000 * age + rng.normal(0, 20_000, n)
y = price.astype("float32")

keras.utils.set_random_seed(0)
model = keras.Sequential(
    [
        keras.Input(shape=(3,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01), loss="mse")
history = model.fit(x, y, epochs=3, batch_size=32, verbose=2)
print("final loss", history.history["loss"][-1])
