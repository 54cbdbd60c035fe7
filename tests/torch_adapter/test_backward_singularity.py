"""A WGAN-GP critic's hand-written gradient norm at a zero vector: the forward is finite, the
root's derivative is not; named in the backward pass at the root's line, update skipped."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")

import gradient_doctor.torch as doctor_torch  # noqa: E402
from tests.conftest import line_of  # noqa: E402
from tests.scripts.torch import wgan_gp_padded_rows as script  # noqa: E402
from tests.torch_adapter.conftest import (  # noqa: E402
    first_nonfinite_step,
    run_until_stopped,
    same_state,
)

SCRIPT = "tests/scripts/torch/wgan_gp_padded_rows.py"


def test_the_roots_gradient_at_zero_is_named_in_the_backward_pass_at_its_line():
    trainer = script.CriticTrainer()
    watched = doctor_torch.watch(
        trainer.step, model=trainer.critic, optimizer=trainer.optimizer, verbose=False
    )
    finding, calls = run_until_stopped(watched, script.batches(epochs=2))

    plain = script.CriticTrainer()
    expected = first_nonfinite_step(
        plain.step, script.batches(epochs=2), list(plain.critic.parameters())
    )
    assert expected == script.ROWS // script.BATCH  # the first padded batch
    assert finding is not None and (finding.step, calls) == (expected, expected + 1)
    assert (finding.category, finding.phase) == ("backward_singularity", "backward")
    origin = finding.origin
    # torch's sqrt backward is grad / (2 * result): aten.div inside SqrtBackward0.
    assert (origin.op, origin.gradient_of) == ("RealDiv", "Sqrt")
    assert "SqrtBackward0" in origin.op_name and origin.layer is None
    assert (origin.source.file, origin.source.line) == (
        SCRIPT,
        line_of(SCRIPT, "norm = torch.sqrt((g**2).sum(dim=1))"),
    )
    padded = script.BATCH - script.ROWS % script.BATCH
    assert origin.inputs[1].zeros == padded and origin.outputs[0].inf == padded
    assert f"{padded} values sat exactly on that point" in finding.explanation
    assert finding.skipped_updates == 1

    # Weights and Adam's moments are those after the steps before the failing one.
    before = script.CriticTrainer()
    for batch in list(script.batches(epochs=2))[:expected]:
        before.step(*batch)
    assert same_state(trainer.critic, trainer.optimizer, before.critic, before.optimizer)


class _PowerRelu(torch.autograd.Function):
    """relu(x) ** 1.5, its backward written by hand reusing the output: 1.5 * y / x,
    0 / 0 wherever x is 0."""

    @staticmethod
    def forward(ctx, x):
        y = x.clamp(min=0) ** 1.5
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, upstream):
        x, y = ctx.saved_tensors
        return upstream * 1.5 * y / x  # the user's own backward


def test_an_op_of_a_custom_backward_is_placed_at_the_users_backward_line():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, mask):
        optimizer.zero_grad()
        hidden = model[0](x) * mask  # padded rows exactly 0
        loss = model[1](_PowerRelu.apply(hidden)).mean()
        loss.backward()
        optimizer.step()

    watched = doctor_torch.watch(step, model=model, optimizer=optimizer, verbose=False)
    mask = torch.ones(8, 1)
    mask[6:] = 0.0
    finding, _ = run_until_stopped(watched, [(torch.randn(8, 4), mask)])
    assert (finding.category, finding.phase) == ("backward_singularity", "backward")
    origin = finding.origin
    assert (origin.op, origin.gradient_of) == ("RealDiv", None)
    lines, first = inspect.getsourcelines(_PowerRelu.backward)
    assert origin.source.line == first + len(lines) - 1  # its last line, the division
    assert "a backward pass you wrote" in finding.explanation
