"""Message-passing GNN regressor whose loss turns to NaN after a while.

Story 1 of gradient-doctor: each synthetic "molecule" has N atoms, and each atom is
bonded to K neighbours. A message-passing layer scores every bond with a one-layer
Dense net applied to [mean of the two atoms' features, bond length e], turns the
scores into attention weights with a hand-written softmax over the neighbours, and
averages the neighbours' features with those weights. The bond length e is always in
[0.5, 4] and never NaN. The target is set by the atom at the other end of each atom's
longest bond, so the best model wants ever sharper attention: the Dense weight on e,
and with it the largest score, grows slowly and steadily (from ~2 to ~83 over the
first 800 steps), lingers just below the limit, and around step 2000 (1910 with TensorFlow's oneDNN
kernels, 2133 without) a score passes 88.72: float32 `tf.exp` overflows to inf, inf / inf is NaN,
and the loss goes NaN.
Gradient clipping or a smaller learning rate only delay this; gradients are not the
problem, the hand-written softmax is.

Expected: category=forward_overflow op=Exp phase=forward line=68
"""

import keras
import numpy as np
import tensorflow as tf

NUM_GRAPHS = 2048
NUM_NODES = 8  # atoms per molecule
NUM_NEIGHBOURS = 4  # bonds per atom
NUM_FEATURES = 4
BATCH_SIZE = 16
EPOCHS = 20


def random_bonds(rng):
    """For each atom, the indices of K distinct other atoms it is bonded to."""
    others = [np.delete(np.arange(NUM_NODES), i) for i in range(NUM_NODES)]
    return np.stack([rng.choice(o, NUM_NEIGHBOURS, replace=False) for o in others]).astype("int32")


def make_graphs(rng):
    """Random molecules with a fixed number of atoms and bonds, so tensors are dense."""
    nodes = rng.normal(size=(NUM_GRAPHS, NUM_NODES, NUM_FEATURES)).astype("float32")
    # Each atom bonds to K other atoms of the same molecule.
    neighbours = np.stack([random_bonds(rng) for _ in range(NUM_GRAPHS)])
    # Bond lengths: always in [0.5, 4], never NaN, never large.
    bond_length = rng.uniform(0.5, 4.0, size=(NUM_GRAPHS, NUM_NODES, NUM_NEIGHBOURS, 1))
    bond_length = bond_length.astype("float32")
    # The property is driven by the atom at the other end of each atom's longest bond.
    longest = np.argmax(bond_length[..., 0], axis=-1)
    far_atom = np.take_along_axis(neighbours, longest[..., None], axis=-1)[..., 0]
    far_feature = np.take_along_axis(nodes[..., 0], far_atom, axis=-1)
    target = far_feature.mean(axis=-1, keepdims=True)
    target += 0.05 * rng.normal(size=target.shape)  # measurement noise
    return (nodes, neighbours, bond_length), target.astype("float32")


class MessagePassing(keras.layers.Layer):
    """Updates each atom with an attention-weighted mean of its neighbours' features."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # One score per bond. No bias: the softmax ignores a constant shift anyway.
        self.net = keras.layers.Dense(1, use_bias=False)

    def call(self, nodes, neighbours, bond_length):
        neighbour_nodes = tf.gather(nodes, neighbours, batch_dims=1)  # (B, N, K, F)
        neighbours_mean = 0.5 * (nodes[:, :, None, :] + neighbour_nodes)
        z = tf.concat([neighbours_mean, bond_length], axis=-1)
        scores = self.net(z)  # (B, N, K, 1)
        # Softmax over the neighbours, written out by hand.
        w = tf.exp(scores)
        w = w / tf.reduce_sum(w, axis=2, keepdims=True)
        return tf.reduce_sum(w * neighbour_nodes, axis=2)  # (B, N, F)


def build_model():
    nodes = keras.Input((NUM_NODES, NUM_FEATURES), name="nodes")
    neighbours = keras.Input((NUM_NODES, NUM_NEIGHBOURS), dtype="int32", name="neighbours")
    bond_length = keras.Input((NUM_NODES, NUM_NEIGHBOURS, 1), name="bond_length")
    h = MessagePassing(name="message_passing")(nodes, neighbours, bond_length)
    h = keras.layers.GlobalAveragePooling1D()(h)
    h = keras.layers.Dense(16, activation="relu")(h)
    # Two outputs: the prediction's mean and log(sigma).
    out = keras.layers.Dense(2)(h)
    return keras.Model([nodes, neighbours, bond_length], out)


def robust_loss(y_true, y_pred):
    """Laplace-style negative log-likelihood with a learned per-sample scale."""
    mean, sigma = tf.split(y_pred, 2, axis=-1)
    loss = np.sqrt(2.0) * tf.abs(mean - y_true) * tf.exp(-sigma) + sigma
    return tf.reduce_mean(loss)


def main():
    keras.utils.set_random_seed(1)
    inputs, target = make_graphs(np.random.default_rng(1))
    dataset = (
        tf.data.Dataset.from_tensor_slices((inputs, target))
        .shuffle(NUM_GRAPHS, seed=1)
        .batch(BATCH_SIZE)
    )
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-1), loss=robust_loss)
    history = model.fit(
        dataset, epochs=EPOCHS, verbose=2, callbacks=[keras.callbacks.TerminateOnNaN()]
    )
    print("final loss:", history.history["loss"][-1])


if __name__ == "__main__":
    main()
