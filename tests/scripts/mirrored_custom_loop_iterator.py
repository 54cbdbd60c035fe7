"""MirroredStrategy on two logical CPUs, the tutorial's custom loop: `next(iterator)` in the step.

The step function takes the iterator and draws the batch inside (so the batch is no
argument the doctor sees outside); `strategy.run` hands each replica its shard of 8
rows. Row 2 * 16 + 13 (batch 2, replica 1's shard, its row 5) is all zeros: the
projection of that row is 0, and the gradient of the row norm's `tf.sqrt` at 0 is
infinite. What the doctor should find: `backward_singularity` at step 2, replica 1,
the gradient of `Sqrt` at the line `return tf.sqrt(...)`, the replayed shard of
shape [8, 4]; the update skipped on both replicas. With `--healthy` no row is 0 and
the script prints the six steps' losses, to compare watched and unwatched runs.
"""

import sys

import keras
import numpy as np
import tensorflow as tf

cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)

GLOBAL_BATCH = 16


class RowNorm(keras.layers.Layer):
    """Each row's Euclidean length, as one more feature."""

    def call(self, inputs):
        return tf.sqrt(tf.reduce_sum(tf.square(inputs), axis=1, keepdims=True))


def main() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6 * GLOBAL_BATCH, 4)).astype("float32")
    y = rng.normal(size=(6 * GLOBAL_BATCH, 1)).astype("float32")
    if "--healthy" not in sys.argv:
        x[2 * GLOBAL_BATCH + 13] = 0.0
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    with strategy.scope():
        keras.utils.set_random_seed(2)
        inputs = keras.Input((4,))
        projected = keras.layers.Dense(4, use_bias=False)(inputs)
        features = keras.layers.Concatenate()([projected, RowNorm()(projected)])
        model = keras.Model(inputs, keras.layers.Dense(1)(features))
        optimizer = keras.optimizers.SGD(0.05)

    def replica_step(batch):
        features, targets = batch
        with tf.GradientTape() as tape:
            per_row = keras.losses.mean_squared_error(targets, model(features, training=True))
            loss = tf.nn.compute_average_loss(per_row, global_batch_size=GLOBAL_BATCH)
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )
        return loss

    @tf.function
    def train_step(iterator):
        losses = strategy.run(replica_step, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    losses = [float(train_step(iterator)) for _ in range(6)]
    print("losses:", " ".join(repr(loss) for loss in losses))


if __name__ == "__main__":
    main()
