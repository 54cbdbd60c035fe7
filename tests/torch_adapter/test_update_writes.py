"""Weights a step read already NaN, written by the update before it from finite gradients
(a hand-written optimizer's 0/0), named as that update through `watch()`: not as an op of
the step, nor as the data's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import gradient_doctor.torch as doctor_torch  # noqa: E402
from tests.torch_adapter.conftest import run_until_stopped  # noqa: E402


class RootFree(torch.optim.Optimizer):
    """Adagrad without its epsilon: a parameter whose gradients were all 0 divides 0 by 0."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state.setdefault("sum", torch.zeros_like(p)).add_(p.grad * p.grad)
                p.sub_(group["lr"] * p.grad / state["sum"].sqrt())


def _batches(count):
    generator = torch.Generator().manual_seed(0)
    for _ in range(count):
        words = torch.randint(0, 40, (16, 4), generator=generator)
        yield words, (words % 3)[:, 0]


def test_nan_an_own_optimizer_wrote_from_finite_gradients_is_that_update():
    torch.manual_seed(0)
    table, head = torch.nn.EmbeddingBag(200, 8), torch.nn.Linear(8, 3)
    model = torch.nn.Sequential(table, head)
    optimizer = RootFree(model.parameters(), lr=0.05)

    def step(words, labels):
        loss = torch.nn.functional.cross_entropy(head(table(words)), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    watched = doctor_torch.watch(step, model=model, optimizer=optimizer, verbose=False)
    finding, calls = run_until_stopped(watched, _batches(10))
    assert finding is not None and calls == 2  # step 0 wrote the NaN, step 1 read it
    assert (finding.category, finding.step) == ("optimizer_overflow", 0)
    assert "its RootFree update wrote them" in finding.explanation
    assert finding.fixes[0].family == "safe_div"
    assert "RootFree.step" in finding.fixes[0].title
