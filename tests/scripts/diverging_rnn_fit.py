"""A SimpleRNN classifier fit with SGD at a learning rate of 1.0 (momentum 0.9).

Nothing goes non-finite: the tanh cell keeps every value bounded while its recurrent
weights grow a thousandfold, and the loss climbs from 0.8 to 3-10 and stays there
(accuracy at chance). Expected: `loss_diverged`, the learning rate lowered where the
optimizer is built, verified by a patched copy that learns (10x is not enough here:
that copy learns for two epochs, then diverges again; 100x learns).
"""

import keras
import numpy as np

keras.utils.set_random_seed(3)
rng = np.random.default_rng(3)
x = rng.normal(size=(512, 30, 8)).astype("float32")
y = (x[:, :, 0].sum(axis=1) > 0).astype("float32")

model = keras.Sequential(
    [
        keras.Input((30, 8)),
        keras.layers.SimpleRNN(64, activation="tanh"),
        keras.layers.Dense(1),
    ]
)
model.compile(
    optimizer=keras.optimizers.SGD(learning_rate=1.0, momentum=0.9),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(x, y, batch_size=32, epochs=5, verbose=2)
