"""Watching changes nothing a healthy torch run computes: losses, weights, optimizer state
and the random draws after it are bit-identical watched and unwatched."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import gradient_doctor.torch as doctor_torch  # noqa: E402
from tests.scripts.torch import mlp_log_of_sigmoid as script  # noqa: E402
from tests.torch_adapter.conftest import run_until_stopped, same_state  # noqa: E402

STEPS = 40
HEALTHY_RATE = 0.02


def _train(watched: bool):
    model, optimizer, step = script.build(seed=1, learning_rate=HEALTHY_RATE)
    if watched:
        step = doctor_torch.watch(step, model=model, optimizer=optimizer, verbose=False)
    losses = []
    for batch in script.batches(STEPS):
        losses.append(step(*batch))
    return model, optimizer, step, torch.stack(losses), torch.rand(4)


def test_a_healthy_run_is_bit_identical_watched_and_unwatched():
    model, optimizer, step, losses, draws = _train(watched=True)
    plain_model, plain_optimizer, _, plain_losses, plain_draws = _train(watched=False)
    assert torch.isfinite(plain_losses).all()
    assert torch.equal(losses, plain_losses)
    assert same_state(model, optimizer, plain_model, plain_optimizer)
    assert torch.equal(draws, plain_draws)  # dropout drew the same masks, nothing more
    report = step.report()
    assert (report.status, report.framework, report.steps_watched) == ("healthy", "torch", STEPS)
    (loss_series,) = [s for s in report.series if s.name == "loss"]
    assert loss_series.values[-1] == pytest.approx(float(losses[-1]))


def test_calls_without_an_update_are_not_steps():
    model, optimizer, step = script.build(learning_rate=HEALTHY_RATE)

    def evaluate(x, y):
        with torch.no_grad():
            return model(x)[0].mean()

    watched_step = doctor_torch.watch(step, model=model, optimizer=optimizer, verbose=False)
    watched_eval = doctor_torch.watch(evaluate, optimizer=torch.optim.SGD([torch.zeros(1)]))
    finding, calls = run_until_stopped(watched_step, script.batches(3))
    for batch in script.batches(2):
        watched_eval(*batch)
    assert (finding, calls, watched_step.session.steps_watched) == (None, 3, 3)
    assert watched_eval.session.steps_watched == 0


def test_watch_rejects_what_is_not_an_optimizer():
    with pytest.raises(
        TypeError, match=r"`optimizer` must be a `torch.optim.Optimizer`.*Received: optimizer='sgd'"
    ):
        doctor_torch.watch(lambda: None, optimizer="sgd")
    with pytest.raises(TypeError, match=r"`model` must be a `torch.nn.Module`.*Received: model=3"):
        doctor_torch.watch(lambda: None, optimizer=torch.optim.SGD([torch.zeros(1)]), model=3)
