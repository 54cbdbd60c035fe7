"""`safe_norm`: the Euclidean norm's value, and finite gradients at a zero vector."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch.ops import safe_norm  # noqa: E402
from tests.torch_ops.conftest import as_float64, value_and_gradients  # noqa: E402


def row_norm(v):
    return safe_norm(v, dim=-1)


def hand_written_norm(v):
    return torch.sqrt((v**2).sum(dim=-1))


def test_value_and_gradient_match_vector_norm_away_from_zero(precision):
    x = precision.constant([[3.0, -4.0, 12.0], [0.5, 0.25, -1.0]])
    value, (gradient,) = value_and_gradients(row_norm, x)
    exact = as_float64(x)
    norm = np.linalg.norm(exact, axis=-1)
    precision.check(value, norm)
    precision.check(value, as_float64(torch.linalg.vector_norm(x, dim=-1)))
    precision.check(gradient, exact / norm[:, None])
    assert row_norm(x).dtype == precision.dtype


def test_zero_vector_has_value_and_gradient_zero_where_the_hand_written_root_is_nan(precision):
    x = precision.constant([[0.0, 0.0, 0.0], [1.0, 2.0, -2.0]])
    value, (gradient,) = value_and_gradients(row_norm, x)
    precision.check(value, [0.0, 3.0])
    precision.check(gradient, [[0.0, 0.0, 0.0], [1 / 3, 2 / 3, -2 / 3]])

    _, (raw_gradient,) = value_and_gradients(hand_written_norm, x)
    assert np.isnan(raw_gradient[0]).all()


def test_zero_vector_in_every_autograd_mode(mode):
    value, (gradient,) = value_and_gradients(row_norm, torch.zeros(2, 4), mode=mode)
    assert (value == 0).all()
    assert (gradient == 0).all()


def gradient_penalty_gradient(x):
    """d/dx of sum(d||x||/dx), through `create_graph=True` as a WGAN-GP penalty takes it."""
    x = x.clone().requires_grad_(True)
    (inner,) = torch.autograd.grad(safe_norm(x), x, create_graph=True)
    (outer,) = torch.autograd.grad(inner.sum(), x)
    return as_float64(outer)


def test_second_order_gradient_is_exact_and_finite_at_zero(float32):
    x = torch.tensor([1.0, 2.0, 2.0])
    # d/dx_j sum_i x_i/|x| = 1/|x| - (sum_i x_i) x_j / |x|^3
    float32.check(gradient_penalty_gradient(x), 1 / 3 - 5 * np.array([1.0, 2.0, 2.0]) / 27)
    assert (gradient_penalty_gradient(torch.zeros(3)) == 0).all()


def test_float16_does_not_overflow_where_the_hand_written_root_does():
    x = torch.tensor([300.0, 400.0], dtype=torch.float16)
    value, (gradient,) = value_and_gradients(safe_norm, x)
    assert value == 500.0
    np.testing.assert_allclose(gradient, [0.6, 0.8], rtol=2e-3)
    assert torch.isinf(hand_written_norm(x))


def test_tiny_vector_does_not_underflow_to_zero(float32):
    x = torch.tensor([3e-30, 4e-30])
    value, (gradient,) = value_and_gradients(safe_norm, x)
    float32.check(value, 5e-30)
    float32.check(gradient, [0.6, 0.8])
    assert hand_written_norm(x) == 0.0


def test_non_finite_entries_propagate_as_the_plain_norm_does():
    assert torch.isinf(safe_norm(torch.tensor([float("inf"), 1.0])))
    assert torch.isnan(safe_norm(torch.tensor([float("nan"), 0.0])))


def test_a_zero_dimensional_tensor_has_its_magnitude_as_norm():
    value, (gradient,) = value_and_gradients(safe_norm, torch.tensor(-2.0))
    assert value == 2.0 and gradient == -1.0
    assert value_and_gradients(safe_norm, torch.tensor(0.0))[1][0] == 0.0


@pytest.mark.parametrize(
    ("dim", "keepdim", "shape"),
    [
        (None, False, ()),
        (None, True, (1, 1)),
        ((0, 1), False, ()),
        (0, True, (1, 2)),
        ([1], False, (3,)),
    ],
)
def test_dims_and_keepdim_match_vector_norm(float32, dim, keepdim, shape):
    x = torch.tensor([[0.0, 0.0], [3.0, 4.0], [1.0, -1.0]])
    value = safe_norm(x, dim=dim, keepdim=keepdim)
    assert tuple(value.shape) == shape
    expected = torch.linalg.vector_norm(x, dim=dim, keepdim=keepdim)
    float32.check(as_float64(value), as_float64(expected))


@pytest.mark.parametrize("dim", ["last", (), 1.0, (0, "1"), True])
def test_invalid_dim_fails_early(dim):
    with pytest.raises(ValueError, match="`dim` must be None .*Received: dim="):
        safe_norm(torch.ones(2, 2), dim=dim)


def test_invalid_keepdim_and_dtype_fail_early():
    with pytest.raises(ValueError, match="`keepdim` must be a bool. Received: keepdim=1"):
        safe_norm(torch.ones(2), keepdim=1)
    with pytest.raises(TypeError, match=r"`x` must be a floating-point tensor .*x.dtype=int64"):
        safe_norm(torch.tensor([3, 4]))
