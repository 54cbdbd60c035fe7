"""A subclassed policy picks one of 6 actions per state with `tf.argmax(..., axis=1)`.

An eager custom loop (a plain Python step function, no `tf.function`): the policy
scores the actions, `tf.argmax` over axis 1 (its input's last axis) picks one per
state, and the loss is minus the mean payoff of the picked actions, looked up with
`tf.gather`, measured against the average payoff (`loss += ...`). The loss depends
on the policy only through the integer picks, so none of the policy's 4 variables
gets a gradient.

Expected: category=disconnected_gradients op=ArgMax
line="actions = tf.argmax(action_scores, axis=1)"; the reinforce fix's patch adds a
score-function surrogate after `loss += ...` and, applied, trains healthy.
"""

import keras
import numpy as np
import tensorflow as tf

NUM_ACTIONS = 6
STATE_SIZE = 4


class Policy(keras.Model):
    """Scores each action from the state."""

    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="tanh")
        self.scores = keras.layers.Dense(NUM_ACTIONS)

    def call(self, states):
        return self.scores(self.hidden(states))


def main():
    keras.utils.set_random_seed(11)
    rng = np.random.default_rng(11)
    states = rng.normal(size=(192, STATE_SIZE)).astype("float32")
    payoff = tf.constant(rng.uniform(0.0, 1.0, size=NUM_ACTIONS), tf.float32)
    policy = Policy()
    optimizer = keras.optimizers.SGD(learning_rate=0.05)

    def train_step(batch):
        with tf.GradientTape() as tape:
            action_scores = policy(batch)
            actions = tf.argmax(action_scores, axis=1)
            loss = -tf.reduce_mean(tf.gather(payoff, actions))
            loss += tf.reduce_mean(payoff)  # relative to a random pick
        grads = tape.gradient(loss, policy.trainable_variables)
        optimizer.apply_gradients(zip(grads, policy.trainable_variables))
        return loss

    for epoch in range(2):
        for start in range(0, len(states), 32):
            loss = train_step(states[start : start + 32])
        print(f"epoch {epoch}: loss={float(loss):.4f}")


if __name__ == "__main__":
    main()
