"""`safe_div`: x / y, with a fallback and finite gradients where y == 0."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch.ops import safe_div  # noqa: E402
from tests.torch_ops.conftest import all_finite, value_and_gradients  # noqa: E402


def test_value_and_gradients_match_the_analytic_ones(precision):
    x = precision.constant([1.0, -2.0, 3.0])
    y = precision.constant([0.0, 4.0, -0.5])
    value, (dx, dy) = value_and_gradients(safe_div, x, y)
    precision.check(value, [0.0, -0.5, -6.0])
    precision.check(dx, [0.0, 0.25, -2.0])
    precision.check(dy, [0.0, 0.125, -12.0])  # -x / y**2
    assert safe_div(x, y).dtype == precision.dtype


def test_zero_divisor_is_finite_where_division_and_single_where_are_not(precision):
    x, y = precision.constant([1.0]), precision.constant([0.0])
    _, gradients = value_and_gradients(safe_div, x, y)
    assert all(gradient[0] == 0.0 for gradient in gradients)

    raw_value, raw_gradients = value_and_gradients(lambda a, b: a / b, x, y)
    assert not all_finite(raw_value)
    assert not any(all_finite(gradient) for gradient in raw_gradients)
    _, (_, where_dy) = value_and_gradients(
        lambda a, b: torch.where(b != 0, a / b, torch.zeros_like(a)), x, y
    )
    assert np.isnan(where_dy[0])


def test_fallback_tensor_is_returned_and_receives_the_gradient(float32):
    x, y = torch.tensor([1.0, 6.0]), torch.tensor([0.0, 3.0])
    fallback = torch.tensor([7.0, 7.0])
    value, (dx, dy, dfallback) = value_and_gradients(safe_div, x, y, fallback)
    float32.check(value, [7.0, 2.0])
    float32.check(dfallback, [1.0, 0.0])
    assert all_finite(dx) and all_finite(dy)


def test_divisor_broadcasts_against_the_dividend(float32):
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    value = safe_div(x, torch.tensor([0.0, 2.0]), fallback=-1.0)
    float32.check(value.numpy(), [[-1.0, 1.0], [-1.0, 2.0]])


def test_a_python_number_takes_the_tensor_s_dtype():
    half = torch.tensor([1.0, 3.0], dtype=torch.float16)
    assert safe_div(half, 2.0).dtype == torch.float16
    assert safe_div(1.0, half).dtype == torch.float16
    np.testing.assert_array_equal(safe_div(half, 0.0).numpy(), [0.0, 0.0])


def test_zero_divisor_in_every_autograd_mode(mode):
    value, (dx, dy) = value_and_gradients(
        safe_div, torch.tensor([1.0, 1.0]), torch.tensor([0.0, 2.0]), mode=mode
    )
    np.testing.assert_array_equal(value, [0.0, 0.5])
    np.testing.assert_array_equal(dx, [0.0, 0.5])
    np.testing.assert_array_equal(dy, [0.0, -0.25])


def test_mixed_dtypes_fail_early():
    with pytest.raises(TypeError, match=r"same dtype. Received: x.dtype=float32, y.dtype=float16"):
        safe_div(torch.ones(2), torch.ones(2, dtype=torch.float16))


def test_an_integer_divisor_is_named_as_the_argument_at_fault():
    with pytest.raises(TypeError, match=r"`y` must be a floating-point tensor .*y.dtype=int64"):
        safe_div(1.0, torch.tensor([2]))
