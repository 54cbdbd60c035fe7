"""The user's code of the toy framework: a two-layer net with a hand-written forward and backward.

Its loss is a binary cross-entropy written by hand, `log(1 - p)` of a sigmoid's `p`:
once the logits pass ~17, float32 rounds `p` to 1 and that log is -inf.
"""

from __future__ import annotations

import numpy as np

from tests.core import toy_adapter as toy


class TwoLayerNet:
    """x -> dense (ReLU) -> dense_1 (sigmoid) -> binary cross-entropy."""

    def __init__(self, seed: int, inputs: int = 4, hidden: int = 8) -> None:
        rng = np.random.default_rng(seed)
        self.w1 = toy.Variable(rng.normal(0, 0.5, (inputs, hidden)), "dense/kernel")
        self.w2 = toy.Variable(rng.normal(0, 0.5, (hidden, 1)), "dense_1/kernel")

    @property
    def variables(self) -> list[toy.Variable]:
        return [self.w1, self.w2]

    def loss_and_grads(self, x, y):
        """The loss and, by hand, its gradient with respect to each variable."""
        w1 = self.w1.read()
        h = toy.matmul(x, w1, layer="dense")
        a = toy.relu(h, layer="dense")
        w2 = self.w2.read()
        z = toy.matmul(a, w2, layer="dense_1")
        p = toy.sigmoid(z, layer="dense_1")
        log_p = toy.log(p)
        q = toy.sub(1.0, p)
        log_q = toy.log(q)
        terms = toy.add(toy.mul(y, log_p), toy.mul(toy.sub(1.0, y), log_q))
        loss = toy.sub(0.0, toy.mean(terms))
        # Backward, by hand: d loss / d terms is -1/n for each term.
        d_terms = np.full(terms.shape, -1.0 / terms.size, np.float32)
        d_log_p = toy.mul(d_terms, y, of=log_p)
        d_log_q = toy.mul(d_terms, toy.sub(1.0, y), of=log_q)
        d_p = toy.sub(toy.div(d_log_p, p, of=log_p), toy.div(d_log_q, q, of=q), of=q)
        d_z = toy.mul(d_p, toy.mul(p, q), of=p)
        d_w2 = toy.matmul(toy.transpose(a, of=z), d_z, of=z)
        d_a = toy.matmul(d_z, toy.transpose(w2, of=z), of=z)
        d_h = toy.mul(d_a, (h > 0).astype(np.float32), of=a)
        d_w1 = toy.matmul(toy.transpose(x, of=h), d_h, of=h)
        return loss, [(d_w1, self.w1), (d_w2, self.w2)]


def train_step(net: TwoLayerNet, optimizer: toy.SGD, x, y):
    """One step of the user's loop: forward, backward, update."""
    loss, grads = net.loss_and_grads(x, y)
    optimizer.apply(loss, grads)
    return loss
