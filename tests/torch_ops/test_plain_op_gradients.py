"""Away from their singular points the safe ops are the plain ones: `torch.autograd.gradcheck`
and `gradgradcheck` in float64, and the same values and gradients as the op they replace."""

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch import ops  # noqa: E402

IDS = torch.tensor([1, 0, 1, 1])


def plain_segment_softmax(x):
    e = torch.exp(x)
    return e / torch.zeros(2, dtype=x.dtype).index_add(0, IDS, e)[IDS]


# name: (safe op, the plain op it replaces, inputs away from its singular points)
CASES = {
    "safe_sqrt": (ops.safe_sqrt, torch.sqrt, ([0.3, 2.0, 7.5],)),
    "safe_log": (ops.safe_log, torch.log, ([0.3, 2.0, 7.5],)),
    "safe_div": (ops.safe_div, torch.div, ([1.0, -2.0, 3.0], [0.5, 4.0, -1.5])),
    "safe_norm": (
        lambda x: ops.safe_norm(x, dim=1),
        lambda x: torch.sqrt((x**2).sum(dim=1)),
        ([[3.0, -4.0, 1.0], [0.5, 0.25, -2.0]],),
    ),
    "safe_acos": (ops.safe_acos, torch.acos, ([-0.9, 0.1, 0.7],)),
    "safe_asin": (ops.safe_asin, torch.asin, ([-0.9, 0.1, 0.7],)),
    "safe_where": (
        lambda x: ops.safe_where(x > 0, torch.log, x),
        lambda x: torch.where(x > 0, torch.log(x), 0.0),
        ([0.3, 2.0, 7.5],),
    ),
    "stable_logsumexp": (
        ops.stable_logsumexp,
        lambda x: torch.log(torch.exp(x).sum(dim=-1)),
        ([[1.0, -0.5, 2.0], [0.0, 3.0, -1.0]],),
    ),
    "stable_softmax": (
        ops.stable_softmax,
        lambda x: torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True),
        ([[1.0, -0.5, 2.0], [0.0, 3.0, -1.0]],),
    ),
    "stable_softmax with a mask": (
        lambda x: ops.stable_softmax(x, mask=torch.tensor([1.0, 0.0, 1.0])),
        lambda x: torch.softmax(x.masked_fill(torch.tensor([False, True, False]), -1e30), -1),
        ([[1.0, -0.5, 2.0], [0.0, 3.0, -1.0]],),
    ),
    "stable_segment_softmax": (
        lambda x: ops.stable_segment_softmax(x, IDS, 2),
        plain_segment_softmax,
        ([1.0, -0.5, 2.0, 0.25],),
    ),
}


def float64_inputs(values):
    return tuple(torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck_and_gradgradcheck_pass_in_float64(name):
    safe, _, values = CASES[name]
    inputs = float64_inputs(values)
    assert torch.autograd.gradcheck(safe, inputs)
    assert torch.autograd.gradgradcheck(safe, inputs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_value_and_gradient_equal_the_plain_op_s(name):
    safe, plain, values = CASES[name]
    weights = None
    results = []
    for op in (safe, plain):
        inputs = float64_inputs(values)
        value = op(*inputs)
        if weights is None:  # a softmax sums to 1: weight it so its gradient is not 0
            weights = torch.linspace(-1.0, 2.0, value.numel(), dtype=torch.float64)
        gradients = torch.autograd.grad((value.flatten() * weights).sum(), inputs)
        results.append((value.detach(), gradients))
    (value, gradients), (plain_value, plain_gradients) = results
    torch.testing.assert_close(value, plain_value)
    for gradient, plain_gradient in zip(gradients, plain_gradients):
        torch.testing.assert_close(gradient, plain_gradient)
