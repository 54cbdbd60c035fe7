"""The global optimizer step hooks of `gradient-doctor run`: a healthy loop computes exactly
what it computes unwatched; a non-finite update is skipped (weights and optimizer state those
of the last good step) and its gradients put back; two optimizers each checked on their own."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch_adapter.hooks.script_hooks import (  # noqa: E402
    UpdateHooks,
    UpdateListener,
)
from tests.torch_adapter.conftest import same_state  # noqa: E402


class Seen(UpdateListener):
    def __init__(self):
        self.updates = []

    def after_update(self, update):
        self.updates.append((update.index, update.skipped, update.check))


def _train(steps: int, poison_at: int | None = None, hooks: UpdateHooks | None = None):
    """A small regression trained with Adam; at `poison_at` one input is NaN."""
    if hooks is not None:  # before the script builds its optimizer, as `run` installs them
        hooks.install()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, grads = [], None
    try:
        for step in range(steps):
            x = torch.randn(16, 4)
            if step == poison_at:
                x[0, 0] = float("nan")
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if step == poison_at:
                grads = [p.grad for p in model.parameters()]
    finally:
        if hooks is not None:
            hooks.uninstall()
    return model, optimizer, losses, grads


def test_a_healthy_loop_is_bit_identical_watched_and_each_update_is_checked():
    seen, original = Seen(), torch.autograd.backward
    model, optimizer, losses, _ = _train(12, hooks=UpdateHooks(seen))
    plain_model, plain_optimizer, plain_losses, _ = _train(12)
    assert losses == plain_losses
    assert same_state(model, optimizer, plain_model, plain_optimizer)
    assert [index for index, _, _ in seen.updates] == list(range(12))
    assert not any(skipped for _, skipped, _ in seen.updates)
    assert [check.loss for _, _, check in seen.updates] == pytest.approx(plain_losses)
    assert torch.autograd.backward is original  # given back


def test_a_nan_update_is_skipped_and_its_gradients_put_back():
    seen = Seen()
    model, optimizer, _, grads = _train(6, poison_at=5, hooks=UpdateHooks(seen))
    assert [(index, skipped) for index, skipped, _ in seen.updates][-2:] == [(4, False), (5, True)]
    before, before_optimizer, _, _ = _train(5)
    # The weights and Adam's moments and step counts are those after the five good steps.
    assert same_state(model, optimizer, before, before_optimizer)
    # The user's gradients are where they were, NaN as backward left them.
    assert all(p.grad is g for p, g in zip(model.parameters(), grads))
    assert not all(bool(torch.isfinite(g).all()) for g in grads)


def test_two_optimizers_are_checked_each_on_its_own_gradients():
    seen = Seen()
    hooks = UpdateHooks(seen)
    hooks.install()  # before the optimizers are built, as `run` installs them
    torch.manual_seed(0)
    first, second = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (first, second)]
    try:
        for step in range(3):
            for model, optimizer in zip((first, second), optimizers):
                x = torch.randn(4, 3)
                if model is second and step == 1:
                    x = x * float("inf")
                optimizer.zero_grad()
                model(x).pow(2).mean().backward()
                optimizer.step()
    finally:
        hooks.uninstall()
    assert [skipped for _, skipped, _ in seen.updates] == [False, False, False, True, False, False]


def _lbfgs(steps: int, rate: float, hooks: UpdateHooks | None = None):
    """A Poisson regression with an identity link fitted by LBFGS through a closure: at a
    high `rate` its first step makes some rates negative, and their log NaN."""
    torch.manual_seed(0)
    x = torch.rand(64, 3)
    y = torch.poisson(1.0 + 4.0 * x[:, :1])
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=rate, max_iter=5)
    losses = []

    def closure():
        optimizer.zero_grad()
        rate_ = model(x)
        loss = (rate_ - y * torch.log(rate_)).mean()
        loss.backward()
        return loss

    if hooks is not None:
        hooks.install()
    try:
        for _ in range(steps):
            losses.append(float(optimizer.step(closure)))
    finally:
        if hooks is not None:
            hooks.uninstall()
    return model, optimizer, losses


def test_a_closure_step_is_checked_after_it_ran_and_a_bad_one_undone():
    # Healthy: every step checked, the losses and the state as unwatched.
    seen = Seen()
    model, optimizer, losses = _lbfgs(4, 0.1, UpdateHooks(seen))
    plain_model, plain_optimizer, plain_losses = _lbfgs(4, 0.1)
    assert losses == plain_losses
    assert same_state(model, optimizer, plain_model, plain_optimizer)
    assert [(index, skipped) for index, skipped, _ in seen.updates] == [
        (i, False) for i in range(4)
    ]
    # Too high a rate: a step's closure goes NaN (negative rates under the log). That
    # step and every one after it are undone: the weights and LBFGS's state stay those
    # of the last good step.
    seen = Seen()
    model, optimizer, _ = _lbfgs(3, 10.0, UpdateHooks(seen))
    _, _, plain_losses = _lbfgs(3, 10.0)
    assert any(loss != loss for loss in plain_losses)  # unwatched, it goes NaN
    skipped = [index for index, skipped, _ in seen.updates if skipped]
    assert skipped and skipped == list(range(skipped[0], 3))
    assert not any(check.finite for _, skipped_, check in seen.updates if skipped_)
    good_model, good_optimizer, _ = _lbfgs(skipped[0], 10.0)
    assert same_state(model, optimizer, good_model, good_optimizer)


def _scaled_training(steps: int, hooks: UpdateHooks | None = None):
    """float16 autocast with a GradScaler whose first scale overflows the scaled
    gradients: it skips those updates and lowers its scale (its usual back-off).
    Returns the losses and how many updates the scaler skipped, by its own scale."""
    if hooks is not None:
        hooks.install()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**30)
    losses, lowered = [], 0
    try:
        for _ in range(steps):
            x = torch.randn(16, 8) * 4
            y = (x[:, 0] > 0).long()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            before = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            lowered += scaler.get_scale() < before
            losses.append(loss.item())
    finally:
        if hooks is not None:
            hooks.uninstall()
    return losses, lowered


def test_the_updates_a_grad_scaler_skips_itself_are_counted_apart_and_not_checked():
    seen, original = Seen(), torch.amp.GradScaler.step
    hooks = UpdateHooks(seen)
    losses, lowered = _scaled_training(10, hooks)
    plain_losses, plain_lowered = _scaled_training(10)
    assert losses == plain_losses and lowered == plain_lowered
    assert lowered >= 2  # the scaler backed off several times from 2**30
    assert hooks.scaler_skipped == lowered
    assert len(seen.updates) == 10 - lowered
    assert not any(skipped for _, skipped, _ in seen.updates)
    assert torch.amp.GradScaler.step is original  # given back


def test_a_healthy_line_counts_the_updates_a_loss_scaler_skipped():
    from gradient_doctor.core.report import Report
    from gradient_doctor.render.json_report import report_to_dict
    from gradient_doctor.render.text import header_line

    report = Report(script="train.py", steps_watched=57, framework="torch", scaler_skipped=7)
    line = header_line(report)
    assert line.startswith("healthy: 57 steps watched, no non-finite values reached an update")
    assert "GradScaler skipped 7 more updates itself" in line
    assert report_to_dict(report)["scaler_skipped"] == 7
    assert "scaler_skipped" not in report_to_dict(Report(script="train.py", steps_watched=3))
