"""`safe_acos` and `safe_asin`: finite gradients at exactly +-1."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch.ops import safe_acos, safe_asin  # noqa: E402
from gradient_doctor.torch.ops._precision import machine_epsilon  # noqa: E402
from tests.torch_ops.conftest import all_finite, as_float64, value_and_gradients  # noqa: E402

# (safe op, raw op, numpy value, analytic derivative)
FUNCTIONS = {
    "acos": (safe_acos, torch.acos, np.arccos, lambda x: -1 / np.sqrt(1 - x**2)),
    "asin": (safe_asin, torch.asin, np.arcsin, lambda x: 1 / np.sqrt(1 - x**2)),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_value_and_gradient_match_the_analytic_ones_inside(precision, name):
    safe, _, value64, derivative64 = FUNCTIONS[name]
    x = precision.constant([-0.9, -0.5, 0.0, 0.25, 0.75])
    value, (gradient,) = value_and_gradients(safe, x)
    exact = as_float64(x)
    precision.check(value, value64(exact))
    precision.check(gradient, derivative64(exact))
    assert safe(x).dtype == precision.dtype


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_exactly_one_gives_gradient_zero_where_the_raw_op_is_infinite(precision, name):
    safe, raw, value64, _ = FUNCTIONS[name]
    x = precision.constant([-1.0, 1.0])
    value, (gradient,) = value_and_gradients(safe, x)
    bound = 1 - machine_epsilon(precision.dtype)
    precision.check(value, value64(np.array([-bound, bound])))
    np.testing.assert_array_equal(gradient, [0.0, 0.0])

    _, (raw_gradient,) = value_and_gradients(raw, x)
    assert not all_finite(raw_gradient)


def test_bias_at_one_is_about_sqrt_of_two_eps(precision):
    value = as_float64(safe_acos(precision.constant(1.0)))
    assert 0 < value <= 1.1 * np.sqrt(2 * machine_epsilon(precision.dtype))


def test_cosine_rounded_past_one_stays_finite_where_torch_acos_is_nan():
    x = torch.tensor([1.0000001, -1.5])
    value, (gradient,) = value_and_gradients(safe_acos, x)
    assert all_finite(value) and all_finite(gradient)
    assert torch.isnan(torch.acos(x)).all()


def test_explicit_eps_sets_the_margin(float32):
    value = safe_acos(torch.tensor([1.0, -1.0]), eps=0.01)
    float32.check(value.numpy(), np.arccos([0.99, -0.99]))


def test_eps_that_float16_cannot_hold_is_raised_to_its_machine_epsilon():
    x = torch.tensor([1.0], dtype=torch.float16)
    value, (gradient,) = value_and_gradients(lambda v: safe_acos(v, eps=1e-7), x)
    assert value[0] > 0 and gradient[0] == 0.0


def test_one_in_every_autograd_mode(mode):
    value, (gradient,) = value_and_gradients(safe_acos, torch.tensor([1.0, 0.0]), mode=mode)
    np.testing.assert_allclose(value, [np.arccos(1 - 2.0**-23), np.pi / 2], rtol=1e-6)
    np.testing.assert_array_equal(gradient, [0.0, -1.0])


@pytest.mark.parametrize("eps", [0, 1, -0.1, 1.5, float("nan"), "0.1", False])
def test_invalid_eps_fails_early(eps):
    with pytest.raises(ValueError, match=r"`eps` must be a float in \(0, 1\). Received: eps="):
        safe_asin(torch.ones(2), eps=eps)
