"""A DQN whose targets come from a target network under `torch.no_grad()`, with a frozen
(`requires_grad=False`) embedding of the state handed to the optimizer with the rest:
every parameter that asks for a gradient gets one.

The doctor should find: nothing (healthy); the target network (not in the optimizer)
and the frozen embedding (in it, but asking for no gradient) are not flagged.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

STATES, ACTIONS = 6, 3


class QNetwork(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(STATES, 16)
        self.embed.requires_grad_(False)  # a fixed random projection
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, ACTIONS))

    def forward(self, state):
        return self.body(torch.tanh(self.embed(state)))


def build(seed: int = 0):
    """The online network, its optimizer and the TD-learning step (target synced every 4)."""
    torch.manual_seed(seed)
    online = QNetwork()
    target = copy.deepcopy(online)
    optimizer = torch.optim.Adam(online.parameters(), lr=1e-3)
    calls = [0]

    def train_step(state, action, reward, next_state):
        with torch.no_grad():
            best_next = target(next_state).max(dim=1).values
            td_target = reward + 0.9 * best_next
        q = online(state).gather(1, action[:, None]).squeeze(1)
        loss = F.smooth_l1_loss(q, td_target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        calls[0] += 1
        if calls[0] % 4 == 0:
            target.load_state_dict(online.state_dict())
        return loss.detach()

    return online, optimizer, train_step


def batches(steps: int, seed: int = 0):
    """Batches of 8 random transitions."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        state = torch.randn(8, STATES, generator=generator)
        action = torch.randint(0, ACTIONS, (8,), generator=generator)
        reward = torch.randn(8, generator=generator)
        yield state, action, reward, torch.randn(8, STATES, generator=generator)
