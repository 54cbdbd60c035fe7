"""A custom loop opted in with `gradient_doctor.watch`: the subclassed encoder has no
`Input` and makes its variables at the first call inside the watched `tf.function`, and
SGD with momentum makes its slots at the first update.

The loss is the mean distance (`tf.norm` per row) between the code of each example and
a target code scaled by the example's weight. Run plainly, no weight is 0 and training is
healthy. With `--nan`, one example of step 5 has weight 0: its row is the zero vector,
and the gradient of `tf.norm` at the zero vector is 0/0 = NaN. `--plain` runs the same
loop without the doctor.

Expected (with --nan): category=backward_singularity gradient_of=EuclideanNorm step=5
(on the tf.norm line)
"""

import hashlib
import json
import sys

import keras
import numpy as np
import tensorflow as tf

import gradient_doctor

BATCH = 16


class Encoder(keras.Model):
    def __init__(self, code_size):
        super().__init__()
        self.body = [keras.layers.Dense(12, activation="relu") for _ in range(2)]
        self.code = keras.layers.Dense(code_size)

    def call(self, inputs):
        for layer in self.body:
            inputs = layer(inputs)
        return self.code(inputs)


keras.utils.set_random_seed(5)
rng = np.random.default_rng(5)
inputs = rng.normal(size=(10 * BATCH, 6)).astype("float32")
targets = rng.normal(size=(10 * BATCH, 3)).astype("float32")
weights = rng.uniform(0.5, 1.5, size=(10 * BATCH, 1)).astype("float32")
if "--nan" in sys.argv:
    weights[5 * BATCH + 2] = 0.0

encoder = Encoder(3)
optimizer = keras.optimizers.SGD(0.05, momentum=0.9)


@tf.function
def train_step(x, target, weight):
    with tf.GradientTape() as tape:
        gap = weight * (encoder(x) - target)
        loss = tf.reduce_mean(tf.norm(gap, axis=1))
    grads = tape.gradient(loss, encoder.trainable_variables)
    optimizer.apply_gradients(zip(grads, encoder.trainable_variables))
    return loss


step = train_step
if "--plain" not in sys.argv:
    step = gradient_doctor.watch(train_step, optimizer=optimizer, trial_steps=0)

losses = []
try:
    for start in range(0, len(inputs), BATCH):
        batch = slice(start, start + BATCH)
        losses.append(float(step(inputs[batch], targets[batch], weights[batch])))
except gradient_doctor.TrainingStopped as stopped:
    print("stopped:", stopped)

digest = hashlib.sha256(b"".join(v.numpy().tobytes() for v in encoder.weights)).hexdigest()
print("RESULT", json.dumps({"losses": losses, "weights": digest}))
if "--plain" not in sys.argv:
    from gradient_doctor.render.json_report import report_to_dict

    print("DOCTOR", json.dumps(report_to_dict(step.report())))
