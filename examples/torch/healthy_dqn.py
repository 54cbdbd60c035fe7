"""A DQN with a target network on a toy chain world: a healthy PyTorch run the doctor must
leave alone.

The Q-network learns by temporal differences against a frozen copy of itself, the
target network (`copy.deepcopy(...).requires_grad_(False)`, its values computed under
`torch.no_grad()`), copied from the Q-network every 25 steps; a replay buffer of
transitions from an epsilon-greedy policy on a 10-state chain (reward at the right
end) feeds it, with the Huber loss and Adam. The target network gets no gradient by
design and is not in the optimizer: it is no broken gradient path.

The doctor should find: nothing (status healthy, no problems, no warnings); the losses
it prints are the same, bit for bit, watched or not.
"""

import copy
import random

import torch
import torch.nn.functional as F
from torch import nn

STATES, ACTIONS = 10, 2
GAMMA = 0.9
STEPS = 300
BATCH_SIZE = 32
SYNC_EVERY = 25


def one_hot(states):
    return F.one_hot(states, STATES).float()


def move(state, action):
    """The chain: action 1 moves right, 0 left; reaching the right end pays 1 and restarts."""
    nxt = min(state + 1, STATES - 1) if action == 1 else max(state - 1, 0)
    if nxt == STATES - 1:
        return 0, 1.0
    return nxt, 0.0


def main():
    random.seed(0)
    torch.manual_seed(0)
    q_net = nn.Sequential(nn.Linear(STATES, 32), nn.ReLU(), nn.Linear(32, ACTIONS))
    target_net = copy.deepcopy(q_net).requires_grad_(False)
    optimizer = torch.optim.Adam(q_net.parameters(), lr=1e-3)
    buffer, state = [], 0
    for step in range(STEPS):
        epsilon = max(0.1, 1.0 - step / 200)
        if random.random() < epsilon:
            action = random.randrange(ACTIONS)
        else:
            with torch.no_grad():
                action = int(q_net(one_hot(torch.tensor([state]))).argmax())
        nxt, reward = move(state, action)
        buffer.append((state, action, reward, nxt))
        state = nxt
        if len(buffer) < BATCH_SIZE:
            continue
        s, a, r, s2 = map(torch.tensor, zip(*random.sample(buffer[-1000:], BATCH_SIZE)))
        q = q_net(one_hot(s)).gather(1, a[:, None]).squeeze(1)
        with torch.no_grad():
            target = r.float() + GAMMA * target_net(one_hot(s2)).max(dim=1).values
        loss = F.smooth_l1_loss(q, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % SYNC_EVERY == 0:
            target_net.load_state_dict(q_net.state_dict())
        if step % 20 == 0:
            print(f"step {step}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
