"""A two-layer regressor kept as a dict of tf.Variables, trained by a step function whose
tape watches only what it is given (`watch_accessed_variables=False`, written to keep a
frozen statistic out of the gradients) and is given only the hidden layer's variables:
the output layer never trains."""

import numpy as np
import tensorflow as tf

rng = np.random.default_rng(6)
features = rng.normal(size=(640, 10)).astype("float32")
targets = (features[:, :3].sum(axis=1, keepdims=True) ** 2 / 3.0).astype("float32")

tf.random.set_seed(6)
init = tf.keras.initializers.HeNormal(seed=6)
params = {
    "hidden_w": tf.Variable(init((10, 24)), name="hidden_w"),
    "hidden_b": tf.Variable(tf.zeros(24), name="hidden_b"),
    "out_w": tf.Variable(init((24, 1)), name="out_w"),
    "out_b": tf.Variable(tf.zeros(1), name="out_b"),
}
target_scale = tf.Variable(1.0, trainable=False, name="target_scale")
optimizer = tf.keras.optimizers.SGD(learning_rate=0.01)


def train_step(x, y):
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch([params["hidden_w"], params["hidden_b"]])
        hidden = tf.nn.relu(x @ params["hidden_w"] + params["hidden_b"])
        prediction = (hidden @ params["out_w"] + params["out_b"]) * target_scale
        loss = tf.reduce_mean(tf.square(prediction - y))
    variables = list(params.values())
    gradients = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(gradients, variables))
    return loss


for step in range(120):
    rows = rng.integers(0, 640, size=32)
    loss = train_step(features[rows], targets[rows])
    if step % 40 == 0:
        print(step, float(loss))
