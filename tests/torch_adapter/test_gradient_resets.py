"""An optimizer's gradients proved stale by values, never by version counters alone."""

import pytest
import torch
from torch import nn

from gradient_doctor.torch_adapter.step.gradient_resets import GradientResets


@pytest.fixture
def resets():
    watched = GradientResets()
    watched.install()
    yield watched
    watched.uninstall()


def _train(resets: GradientResets, reset, updates: int = 6):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    found = []
    for _ in range(updates):
        ((model(x) - y) ** 2).mean().backward()
        proof = resets.observe(optimizer, list(model.parameters()))
        if proof is not None:
            found.append(proof)
        optimizer.step()
        reset(model, optimizer)
    return found


def test_gradients_never_reset_are_proved_stale_once(resets):
    (proof,) = _train(resets, lambda model, optimizer: None)
    assert (proof.optimizer, proof.update) == ("SGD", 2)
    assert proof.carried > proof.fresh > 0  # two updates' worth carried, one fresh


@pytest.mark.parametrize(
    "reset",
    [
        lambda model, optimizer: optimizer.zero_grad(),
        lambda model, optimizer: model.zero_grad(set_to_none=False),
        lambda model, optimizer: [p.grad.data.zero_() for p in model.parameters()],
        lambda model, optimizer: [setattr(p, "grad", None) for p in model.parameters()],
    ],
    ids=["optimizer_zero_grad", "module_zero_grad_in_place", "data_zero", "set_to_none"],
)
def test_gradients_reset_any_way_are_not(resets, reset):
    assert _train(resets, reset) == []
    assert resets._probe is None  # a probe that found them reset is not opened again


def test_uninstalled_the_zero_grads_are_torchs_own_again():
    originals = (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad)
    watched = GradientResets()
    watched.install()
    assert torch.optim.Optimizer.zero_grad is not originals[0]
    watched.uninstall()
    assert (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad) == originals


def test_the_watch_api_reports_gradients_never_reset_as_a_problem():
    import gradient_doctor.torch

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 4), torch.randn(32, 1)

    def step():  # no zero_grad anywhere
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss

    watched = gradient_doctor.torch.watch(
        step, model=model, optimizer=optimizer, verbose=False, stop_on_problem=False
    )
    for _ in range(6):
        watched()
    (problem,) = watched.report().problems
    assert (problem.category, problem.step) == ("stale_gradients", 2)
    assert [fix.family for fix in problem.fixes] == ["reset_gradients"]


def test_a_probe_that_meets_a_zero_grad_proves_nothing_and_clears_nothing(resets):
    # zero_grad() once per "epoch" of three updates: a probe opened at an epoch's last
    # update would meet the next epoch's reset; one opened at the first suspect update
    # proves the second.
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    found = []
    for update in range(12):
        if update % 3 == 0:
            optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        proof = resets.observe(optimizer, list(model.parameters()))
        found += [proof] if proof is not None else []
        optimizer.step()
    assert [proof.update for proof in found] == [2]
