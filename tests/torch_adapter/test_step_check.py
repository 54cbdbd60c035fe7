"""The per-update check: finite or not from one read; finite gradients a value of which
squares past its dtype (Adam's second moment would be inf) fail too."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch_adapter.step.step_check import check  # noqa: E402


def test_finite_losses_and_gradients():
    grads = [torch.tensor([3.0, 0.0]), torch.tensor([[4.0]])]
    result = check([torch.tensor(0.5)], grads)
    assert (result.finite, result.loss, result.grad_norm) == (True, 0.5, 5.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_nonfinite_gradient_or_loss_fails(bad):
    assert not check([torch.tensor(1.0)], [torch.tensor([1.0, bad])]).finite
    assert not check([torch.tensor(bad)], [torch.tensor([1.0])]).finite


def test_finite_gradients_whose_squares_overflow_fail_naming_the_largest():
    # Adam would keep inf in their second moment and never move them again.
    grads = [torch.full((4,), 3e38), torch.tensor([1e38])]
    assert not math.isfinite(torch.linalg.vector_norm(grads[0]))  # float32's own norm
    result = check([], grads, squares=True)
    assert not result.finite and result.loss is None
    assert result.grad_norm == pytest.approx(math.sqrt(4 * 9 + 1) * 1e38)
    overflow = result.squares_overflow
    assert overflow.gradient is grads[0] and overflow.largest == pytest.approx(3e38)
    assert (overflow.dtype, overflow.stats.shape) == ("float32", (4,))
    # A finite global norm whose one value squares past float32 (2e19 ** 2 > 3.4e38).
    assert check([], [torch.tensor([2e19, 0.0])], squares=True).squares_overflow is not None


def test_large_gradients_whose_squares_fit_their_dtype_pass():
    assert check([], [torch.full((100,), 1e10)], squares=True).finite  # squares fit
    assert check([], [torch.full((3,), 200.0, dtype=torch.float16)], squares=True).finite
    half = check([], [torch.full((3,), 300.0, dtype=torch.float16)], squares=True)
    assert not half.finite and half.squares_overflow.dtype == "float16"  # 300 ** 2 > 65504


def test_for_an_optimizer_that_keeps_no_squares_huge_finite_gradients_are_finite():
    # SGD's update of them is huge, but finite: the next forward says where it lands.
    from gradient_doctor.torch_adapter.step.step_check import keeps_squares

    grads = [torch.full((4,), 3e38), torch.tensor([1e38])]
    result = check([], grads)
    assert result.finite and result.grad_norm == pytest.approx(math.sqrt(37) * 1e38)
    weight = torch.nn.Parameter(torch.zeros(1))
    assert keeps_squares(torch.optim.AdamW([weight])) and keeps_squares(
        torch.optim.RMSprop([weight])
    )
    assert not keeps_squares(torch.optim.SGD([weight], lr=0.1))


def test_no_gradients_and_no_loss():
    assert check([], []).finite


def test_each_gradients_norm_is_read_with_the_rest_in_float32():
    grads = [torch.tensor([3.0, 4.0]), torch.tensor([1.0 / 3.0], dtype=torch.float64)]
    result = check([torch.tensor(0.5)], grads)
    third = torch.tensor(1.0 / 3.0, dtype=torch.float32).item()  # as the statistics read it
    assert result.norms == [5.0, third] and third != 1.0 / 3.0
    assert result.grad_norm == pytest.approx(math.sqrt(25.0 + (1.0 / 3.0) ** 2), rel=1e-15)


def test_the_loss_reads_as_its_sum_whatever_its_dtype_or_shape():
    grads = [torch.tensor([1.0])]
    assert check([torch.tensor(-0.0)], grads).loss == 0.0  # as `sum()` made it
    assert math.copysign(1.0, check([torch.tensor(-0.0)], grads).loss) == 1.0
    assert check([torch.tensor([1.5, 2.0])], grads).loss == 3.5
    assert check([torch.tensor(0.1, dtype=torch.float16)], grads).loss == float(
        torch.tensor(0.1, dtype=torch.float16)
    )
    big = 2**40 + 1  # a loss that is no float is read exactly (in float64)
    assert check([torch.tensor(big)], grads).loss == big


def test_a_failed_check_keeps_no_norms():
    assert check([torch.tensor(1.0)], [torch.tensor([math.nan])]).norms is None
