"""The safe ops under PyTorch's transforms: `torch.func.vmap` of `torch.func.grad` (per-sample
gradients at the singular points) and `torch.compile` (one op, traced whole)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch import ops  # noqa: E402

# Row 0 sits on every op's singular point (zero vector, sqrt(0), log(0), 1/0, acos(1),
# a row of only -inf); row 1 is an ordinary one.
SINGULAR = torch.tensor([[0.0, 0.0, 0.0], [3.0, 4.0, 0.5]])
MINUS_INF = torch.tensor([[-float("inf")] * 3, [1.0, 2.0, 0.5]])
WEIGHTS = torch.tensor([0.5, -1.0, 2.0])

# name: (a scalar function of one row, the rows to map it over)
PER_ROW = {
    "safe_sqrt": (lambda v: ops.safe_sqrt(v).sum(), SINGULAR),
    "safe_log": (lambda v: ops.safe_log(v).sum(), SINGULAR),
    "safe_div": (lambda v: ops.safe_div(torch.ones_like(v), v).sum(), SINGULAR),
    "safe_norm": (ops.safe_norm, SINGULAR),
    "safe_acos": (lambda v: ops.safe_acos(1.0 - v).sum(), SINGULAR),
    "safe_asin": (lambda v: ops.safe_asin(1.0 - v).sum(), SINGULAR),
    "safe_where": (lambda v: ops.safe_where(v > 0, torch.log, v).sum(), SINGULAR),
    "stable_logsumexp": (ops.stable_logsumexp, MINUS_INF),
    "stable_softmax": (lambda v: (ops.stable_softmax(v) * WEIGHTS).sum(), MINUS_INF),
    "stable_segment_softmax": (
        lambda v: (ops.stable_segment_softmax(v, torch.tensor([0, 0, 1]), 2) * WEIGHTS).sum(),
        MINUS_INF,
    ),
}


@pytest.mark.parametrize("name", sorted(PER_ROW))
def test_per_row_gradients_under_vmap_are_finite_and_those_of_autograd(name):
    fn, rows = PER_ROW[name]
    mapped = torch.func.vmap(torch.func.grad(fn))(rows)
    assert torch.isfinite(mapped).all()
    for row, gradient in zip(rows, mapped):
        leaf = row.clone().requires_grad_(True)
        fn(leaf).backward()
        torch.testing.assert_close(gradient, leaf.grad)


def test_a_per_sample_gradient_penalty_is_finite_at_a_zero_gradient():
    # WGAN-GP per sample: the critic's input gradient, its norm, and the gradient of
    # the penalty with respect to the critic's weights, all under vmap.
    weights = torch.tensor([[1.0, -2.0], [0.5, 0.0]])
    samples = torch.tensor([[0.0, 0.0], [1.0, 2.0]])

    def critic(w, x):
        return (torch.relu(x @ w) ** 2).sum()  # relu(0) makes the input gradient 0 at x = 0

    def penalty(w, x):
        input_gradient = torch.func.grad(critic, argnums=1)(w, x)
        return (ops.safe_norm(input_gradient) - 1.0) ** 2

    per_sample = torch.func.vmap(torch.func.grad(penalty), in_dims=(None, 0))(weights, samples)
    assert torch.isfinite(per_sample).all()
    assert (per_sample[0] == 0).all()  # a zero input gradient: the subgradient 0

    def hand_written_penalty(w, x):
        input_gradient = torch.func.grad(critic, argnums=1)(w, x)
        return (torch.sqrt((input_gradient**2).sum()) - 1.0) ** 2

    raw = torch.func.vmap(torch.func.grad(hand_written_penalty), in_dims=(None, 0))(
        weights, samples
    )
    assert torch.isnan(raw[0]).all()
    torch.testing.assert_close(per_sample[1], raw[1])


def test_safe_norm_compiles_whole_with_its_gradient():
    # `aot_eager` traces the forward and the backward graphs as inductor would, without
    # generating C++: inductor compiles the same graphs here, but takes about 50 s.
    compiled = torch.compile(
        lambda x: ops.safe_norm(x, dim=-1), fullgraph=True, backend="aot_eager"
    )
    x = SINGULAR.clone().requires_grad_(True)
    try:
        value = compiled(x)
        value.sum().backward()
    except RuntimeError as error:
        if "not supported" in str(error):
            pytest.skip(f"torch.compile is unavailable here: {error}")
        raise
    finally:
        torch.compiler.reset()
    np.testing.assert_allclose(value.detach().numpy(), [0.0, np.sqrt(25.25)], rtol=1e-6)
    assert torch.isfinite(x.grad).all() and (x.grad[0] == 0).all()
