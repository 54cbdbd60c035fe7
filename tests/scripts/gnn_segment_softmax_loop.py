"""A message-passing layer whose edge attention is a hand-written segment softmax.

Each edge of a small random graph scores its two end nodes with a dot product of
learned projections; `tf.exp` of the scores is normalised over the edges that arrive
at the same node with `tf.math.unsorted_segment_sum` (a GNN's edge attention), in a
custom `tf.function` loop. Adam at 0.1 sharpens the attention until a score passes
float32's exp limit (88.72) at step 8: inf / inf is NaN.

Expected: category=forward_overflow op=Exp phase=forward (the `e = tf.exp(scores)`
line); the max-shift subtracts each receiving node's own largest score, gathered back
to its edges (`unsorted_segment_max`), and the patched script trains healthy.
"""

import keras
import numpy as np
import tensorflow as tf

NODES, EDGES, FEATURES, HIDDEN = 10, 40, 4, 8
rng = np.random.default_rng(7)
keras.utils.set_random_seed(7)
senders = tf.constant(rng.integers(0, NODES, EDGES), tf.int32)
receivers = tf.constant(rng.integers(0, NODES, EDGES), tf.int32)
node_features = tf.constant(3.0 * rng.normal(size=(NODES, FEATURES)).astype("float32"))
node_targets = tf.constant(rng.normal(size=(NODES, FEATURES)).astype("float32"))

query = keras.layers.Dense(HIDDEN, use_bias=False)
key = keras.layers.Dense(HIDDEN, use_bias=False)
value = keras.layers.Dense(FEATURES)
optimizer = keras.optimizers.Adam(0.1)


def message_passing(h):
    """Each node's new features: its incoming messages weighted by a softmax over them."""
    scores = tf.reduce_sum(query(tf.gather(h, receivers)) * key(tf.gather(h, senders)), -1)
    e = tf.exp(scores)
    total = tf.math.unsorted_segment_sum(e, receivers, num_segments=NODES)
    alpha = e / tf.gather(total, receivers)
    messages = alpha[:, None] * value(tf.gather(h, senders))
    return tf.math.unsorted_segment_sum(messages, receivers, NODES)


@tf.function
def train_step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(message_passing(node_features) - node_targets))
    variables = query.trainable_variables + key.trainable_variables + value.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss


for _step in range(40):
    loss = train_step()
print("final loss", float(loss))
