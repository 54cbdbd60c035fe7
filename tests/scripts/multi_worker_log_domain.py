"""Two MultiWorkerMirroredStrategy workers, a custom loop: a zero in worker 1's shard hits `log`.

Started once per worker, each with its own TF_CONFIG (two workers on 127.0.0.1; the
test picks the ports). Every global batch of 16 rows is split in two shards of 8:
worker 0 trains on rows 0-7, worker 1 on rows 8-15. Row 3 * 16 + 11 (batch 3, worker
1's shard, its row 3) holds a 0 in feature 2, which `tf.math.log` turns into -inf.
Each step jitters the features by a stateful `tf.random.uniform` draw.

What the doctor should find, in each worker's report: `forward_domain` at step 3,
replica 1, worker {"type": "worker", "index": 1}, op `Log` at the line
`return tf.math.log(inputs)`, its input the same on both workers (worker 1's
jittered shard: its values and its draws are sent to worker 0 for the replay); the
update of step 3 skipped on both workers and the run stopped on both after it (no
worker left waiting in an all-reduce); fix trials not run (a tf.distribute
strategy). Each worker prints every step's loss: steps 0 to 2 are the same as
without the doctor. With `--healthy` no row is 0: 8 steps train, and each worker
prints whether its weights are finite.
"""

import sys

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 16


class LogFeatures(keras.layers.Layer):
    """Log-scaled features (the inputs are meant to be positive)."""

    def call(self, inputs):
        return tf.math.log(inputs)


def make_dataset() -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 2.0, size=(8 * GLOBAL_BATCH, 4)).astype("float32")
    y = rng.normal(size=(8 * GLOBAL_BATCH, 1)).astype("float32")
    if "--healthy" not in sys.argv:
        x[3 * GLOBAL_BATCH + 11, 2] = 0.0
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)


def main() -> None:
    # Ring all-reduce over gRPC: the CPU collectives.
    communication = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication)
    batches = strategy.experimental_distribute_dataset(make_dataset())
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential(
            [
                keras.Input((4,)),
                LogFeatures(),
                keras.layers.Dense(8, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        optimizer = keras.optimizers.Adam(1e-2)

    def replica_step(features, targets):
        with tf.GradientTape() as tape:
            # Jitter, a stateful draw: the replay of the failing shard draws the same.
            jittered = features * tf.random.uniform(tf.shape(features), 0.9, 1.1)
            predictions = model(jittered, training=True)
            per_row = tf.reduce_mean(tf.square(predictions - targets), axis=1)
            loss = tf.nn.compute_average_loss(per_row, global_batch_size=GLOBAL_BATCH)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    @tf.function
    def train_step(batch):
        losses = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    for step, batch in enumerate(batches):
        print(f"step {step} loss {float(train_step(batch))!r}", flush=True)
    print("weights finite:", all(np.isfinite(w).all() for w in model.get_weights()))


if __name__ == "__main__":
    main()
