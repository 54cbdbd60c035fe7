"""A subclassed model with no `Input`, built by its first call inside fit, with its own
`train_step` (the Keras subclassing tutorial's pattern). Its loss is the mean of
sqrt(feature * softplus(error)).

Run plainly, training is healthy. With `--nan`, one row of batch 7 has that feature at
exactly 0: sqrt(0) is finite but its gradient 0.5 / sqrt(0) is infinite, so the
gradients of step 7 are NaN. With `--doctor`, the script's own `gradient_doctor.Doctor()`
watches fit, and its report is printed.

Expected (with --nan): category=backward_singularity op=SqrtGrad gradient_of=Sqrt step=7
(on the tf.sqrt line)
"""

import hashlib
import json
import sys

import keras
import numpy as np
import tensorflow as tf


class Regressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.head = keras.layers.Dense(1)
        self.tracker = keras.metrics.Mean(name="mean_loss")

    def call(self, x):
        return self.head(self.hidden(x))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            error = self(x, training=True) - y
            loss = tf.reduce_mean(tf.sqrt(x[:, :1] * tf.nn.softplus(error)))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.tracker.update_state(loss)
        return {"mean_loss": self.tracker.result()}

    @property
    def metrics(self):
        return [self.tracker]


class BatchLosses(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(float(logs["mean_loss"]))


keras.utils.set_random_seed(0)
x = np.random.randn(320, 4).astype("float32")
x[:, 0] = 1.0
if "--nan" in sys.argv:
    x[7 * 32 + 5, 0] = 0.0
y = np.random.randn(320, 1).astype("float32")

model = Regressor()
model.compile(optimizer=keras.optimizers.Adam(1e-3))
losses = BatchLosses()
callbacks = [losses]
if "--doctor" in sys.argv:
    import gradient_doctor

    doctor = gradient_doctor.Doctor(trial_steps=0)
    callbacks.append(doctor)
model.fit(x, y, batch_size=32, epochs=2, verbose=0, shuffle=False, callbacks=callbacks)

weights = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
print("RESULT", json.dumps({"losses": losses.seen, "weights": weights}))
if "--doctor" in sys.argv:
    from gradient_doctor.render.json_report import report_to_dict

    print("DOCTOR", json.dumps(report_to_dict(doctor.report())))
