"""`safe_sqrt`: sqrt(max(x, 0)), with gradient 0 at 0."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch.ops import safe_sqrt  # noqa: E402
from tests.torch_ops.conftest import value_and_gradients  # noqa: E402


def test_value_and_gradient_match_the_analytic_ones(precision):
    x = precision.constant([0.0, 0.25, 4.0, 9.0, -1.0])
    value, (gradient,) = value_and_gradients(safe_sqrt, x)
    precision.check(value, [0.0, 0.5, 2.0, 3.0, 0.0])
    precision.check(gradient, [0.0, 1.0, 0.25, 1 / 6, 0.0])
    assert safe_sqrt(x).dtype == precision.dtype


def test_gradient_at_zero_is_zero_where_torch_sqrt_is_infinite(precision):
    x = precision.constant([0.0])
    _, (gradient,) = value_and_gradients(safe_sqrt, x)
    _, (raw_gradient,) = value_and_gradients(torch.sqrt, x)
    assert gradient[0] == 0.0
    assert np.isinf(raw_gradient[0])


def test_zero_in_every_autograd_mode(mode):
    value, (gradient,) = value_and_gradients(safe_sqrt, torch.tensor([0.0, 4.0]), mode=mode)
    np.testing.assert_array_equal(value, [0.0, 2.0])
    np.testing.assert_array_equal(gradient, [0.0, 0.25])


def test_integer_input_fails_early():
    with pytest.raises(TypeError, match=r"`x` must be a floating-point tensor .*x.dtype=int64"):
        safe_sqrt(torch.tensor([4]))
