"""`safe_log`: log(max(x, eps)), finite in value and gradient at 0."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch.ops import safe_log  # noqa: E402
from gradient_doctor.torch.ops._precision import smallest_normal  # noqa: E402
from tests.torch_ops.conftest import all_finite, as_float64, value_and_gradients  # noqa: E402


def test_value_and_gradient_match_log_above_the_floor(precision):
    x = precision.constant([1e-3, 0.5, 1.0, 10.0])
    value, (gradient,) = value_and_gradients(safe_log, x)
    exact = as_float64(x)
    precision.check(value, np.log(exact))
    precision.check(gradient, 1 / exact)
    assert safe_log(x).dtype == precision.dtype


def test_zero_and_negatives_give_log_of_the_floor_where_torch_log_is_infinite(precision):
    x = precision.constant([0.0, -2.0])
    value, (gradient,) = value_and_gradients(safe_log, x)
    precision.check(value, [math.log(smallest_normal(precision.dtype))] * 2)
    np.testing.assert_array_equal(gradient, [0.0, 0.0])

    raw_value, (raw_gradient,) = value_and_gradients(torch.log, x)
    assert not all_finite(raw_value)
    assert not all_finite(raw_gradient)


def test_explicit_eps_is_the_floor(float32):
    x = torch.tensor([0.0, 5e-4, 2e-3])
    value, (gradient,) = value_and_gradients(lambda v: safe_log(v, eps=1e-3), x)
    float32.check(value, np.log([1e-3, 1e-3, 2e-3]))
    float32.check(gradient, [0.0, 0.0, 500.0])


def test_eps_that_float16_cannot_hold_is_raised_to_its_smallest_normal():
    value, (gradient,) = value_and_gradients(
        lambda v: safe_log(v, eps=1e-10), torch.tensor([0.0], dtype=torch.float16)
    )
    assert all_finite(value)
    np.testing.assert_allclose(value, [math.log(2.0**-14)], rtol=1e-3)
    assert gradient[0] == 0.0


def test_nan_stays_nan():
    assert torch.isnan(safe_log(torch.tensor([float("nan")]))).all()


def test_zero_in_every_autograd_mode(mode):
    value, (gradient,) = value_and_gradients(safe_log, torch.tensor([0.0, 1.0]), mode=mode)
    np.testing.assert_allclose(value, [math.log(2.0**-126), 0.0], rtol=1e-6)
    np.testing.assert_array_equal(gradient, [0.0, 1.0])


@pytest.mark.parametrize("eps", [-1, 0, 0.0, float("nan"), float("inf"), True, "1e-3"])
def test_invalid_eps_fails_early(eps):
    with pytest.raises(ValueError, match=r"`eps` must be a float > 0. Received: eps="):
        safe_log(torch.ones(2), eps=eps)


def test_message_echoes_the_value():
    with pytest.raises(ValueError) as error:
        safe_log(torch.ones(2), eps=-1)
    assert str(error.value) == "`eps` must be a float > 0. Received: eps=-1"
