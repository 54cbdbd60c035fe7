"""`safe_where`: the double-where pattern, so the branch not taken cannot poison gradients."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch.ops import safe_where  # noqa: E402
from tests.torch_ops.conftest import as_float64, value_and_gradients  # noqa: E402


def guarded_log(x):
    return safe_where(x > 0, torch.log, x, fallback=0.0)


def test_value_and_gradient_of_the_taken_branch_match_the_analytic_ones(precision):
    x = precision.constant([0.5, 2.0, 10.0])
    value, (gradient,) = value_and_gradients(guarded_log, x)
    exact = as_float64(x)
    precision.check(value, np.log(exact))
    precision.check(gradient, 1 / exact)
    assert guarded_log(x).dtype == precision.dtype


def test_branch_not_taken_gives_zero_gradient_where_a_single_where_gives_nan(precision):
    x = precision.constant([0.0, -1.0, 1.0])
    value, (gradient,) = value_and_gradients(guarded_log, x)
    precision.check(value, [0.0, 0.0, 0.0])
    precision.check(gradient, [0.0, 0.0, 1.0])

    def single_where(v):
        return torch.where(v > 0, torch.log(v), torch.zeros_like(v))

    raw_value, (raw_gradient,) = value_and_gradients(single_where, x)
    precision.check(raw_value, [0.0, 0.0, 0.0])  # the value was never the problem
    assert np.isnan(raw_gradient[0])


def test_fallback_tensor_receives_the_gradient_and_keeps_the_result_dtype():
    x = torch.tensor([0.0, 4.0], dtype=torch.float16)
    fallback = torch.tensor([3.0, 3.0])  # float32: not promoted to
    value, (_, dfallback) = value_and_gradients(
        lambda v, f: safe_where(v > 0, torch.sqrt, v, f), x, fallback
    )
    np.testing.assert_array_equal(value, [3.0, 2.0])
    np.testing.assert_array_equal(dfallback, [1.0, 0.0])
    assert safe_where(x > 0, torch.sqrt, x, fallback).dtype == torch.float16


def test_safe_value_keeps_the_gradient_of_tensors_fn_closes_over_finite():
    # The gradient with respect to `x` is masked whatever the stand-in, but a tensor
    # that `fn` closes over sees fn's gradient at the stand-in: 1/0 for a stand-in of 0.
    numerator, divisor = torch.tensor([6.0, 6.0]), torch.tensor([0.0, 3.0])

    def numerator_gradient(safe_value):
        def fn(n, d):
            return safe_where(d != 0, lambda u: n / u, d, safe_value=safe_value)

        return value_and_gradients(fn, numerator, divisor)[1]

    bad_numerator, bad_divisor = numerator_gradient(0.0)
    assert np.isnan(bad_numerator[0])
    assert bad_divisor[0] == 0.0
    numerator_good, divisor_good = numerator_gradient(torch.tensor(1.0))
    np.testing.assert_allclose(numerator_good, [0.0, 1 / 3], rtol=1e-6)
    np.testing.assert_allclose(divisor_good, [0.0, -6 / 9], rtol=1e-6)


def test_condition_broadcasts_against_x():
    x = torch.tensor([[0.0, 4.0], [9.0, 16.0]])
    value = safe_where(torch.tensor([True, False]), torch.sqrt, x, fallback=-1.0)
    np.testing.assert_array_equal(value.numpy(), [[0.0, -1.0], [3.0, -1.0]])


def test_branch_not_taken_in_every_autograd_mode(mode):
    value, (gradient,) = value_and_gradients(guarded_log, torch.tensor([0.0, 2.0]), mode=mode)
    np.testing.assert_allclose(value, [0.0, np.log(2.0)], rtol=1e-6)
    np.testing.assert_array_equal(gradient, [0.0, 0.5])


def test_invalid_arguments_fail_early():
    with pytest.raises(TypeError, match=r"`fn` must be a callable .*Received: fn=2.0"):
        safe_where(torch.tensor([True]), 2.0, torch.ones(1))
    with pytest.raises(TypeError, match=r"`condition` must be a bool .*condition.dtype=float32"):
        safe_where(torch.ones(1), torch.sqrt, torch.ones(1))
