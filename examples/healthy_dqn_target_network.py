"""DQN on a small corridor world with a target network: healthy.

An agent walks a corridor of 10 cells (actions: left, right) and is rewarded only at the
right end. The online Q network is trained with a `tf.function` custom loop on batches
from a replay buffer. A target network of the same architecture computes the bootstrap
targets inside the tape (no `tf.stop_gradient`), so the tape does see its variables, but
they are never handed to the optimizer: only `online.trainable_variables` are. Every 50
steps the target network is refreshed with `target.set_weights(online.get_weights())`.
All 4 of the online network's trainable variables get gradients on every step; the
target network's variables are intentionally not trained and must not be flagged.

Run plainly, training runs to the end without warnings and prints the greedy policy's
return (the agent learns to walk right).

Expected: category=healthy
"""

import keras
import numpy as np
import tensorflow as tf

NUM_CELLS = 10
NUM_ACTIONS = 2  # 0: left, 1: right
MAX_MOVES = 30
NUM_EPISODES = 40
BATCH_SIZE = 32
GAMMA = 0.9
TARGET_EVERY = 50


class Corridor:
    """Start in cell 0; reward 1 and the episode ends on reaching the last cell."""

    def reset(self):
        self.cell = 0
        return self.observe()

    def observe(self):
        return np.eye(NUM_CELLS, dtype="float32")[self.cell]

    def step(self, action):
        self.cell = int(np.clip(self.cell + (1 if action == 1 else -1), 0, NUM_CELLS - 1))
        done = self.cell == NUM_CELLS - 1
        return self.observe(), float(done), done


def build_q_network():
    return keras.Sequential(
        [
            keras.Input((NUM_CELLS,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(NUM_ACTIONS),
        ]
    )


def greedy_return(env, online):
    state, total = env.reset(), 0.0
    for move in range(MAX_MOVES):
        action = int(np.argmax(online(state[None]).numpy()[0]))
        state, reward, done = env.step(action)
        total += GAMMA**move * reward
        if done:
            break
    return total


def main():
    keras.utils.set_random_seed(7)
    rng = np.random.default_rng(7)
    env = Corridor()
    online = build_q_network()
    target = build_q_network()
    target.set_weights(online.get_weights())
    optimizer = keras.optimizers.Adam(1e-2)

    @tf.function
    def train_step(states, actions, rewards, next_states, dones):
        with tf.GradientTape() as tape:
            next_q = tf.reduce_max(target(next_states), axis=-1)
            targets = rewards + GAMMA * (1.0 - dones) * next_q
            q = tf.reduce_sum(online(states) * tf.one_hot(actions, NUM_ACTIONS), axis=-1)
            loss = tf.reduce_mean(tf.square(targets - q))
        grads = tape.gradient(loss, online.trainable_variables)
        optimizer.apply_gradients(zip(grads, online.trainable_variables))
        return loss

    replay, steps = [], 0
    for episode in range(NUM_EPISODES):
        state = env.reset()
        epsilon = max(0.1, 1.0 - episode / 20)
        for _ in range(MAX_MOVES):
            if rng.random() < epsilon:
                action = int(rng.integers(NUM_ACTIONS))
            else:
                action = int(np.argmax(online(state[None]).numpy()[0]))
            next_state, reward, done = env.step(action)
            replay.append((state, action, reward, next_state, float(done)))
            state = next_state
            if len(replay) >= BATCH_SIZE:
                batch = [replay[i] for i in rng.integers(len(replay), size=BATCH_SIZE)]
                s, a, r, s2, d = (np.array(column) for column in zip(*batch))
                train_step(s, a.astype("int32"), r.astype("float32"), s2, d.astype("float32"))
                steps += 1
                if steps % TARGET_EVERY == 0:
                    target.set_weights(online.get_weights())
            if done:
                break
    print(f"{steps} steps; greedy return: {greedy_return(env, online):.3f}")


if __name__ == "__main__":
    main()
