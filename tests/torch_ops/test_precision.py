"""The per-dtype floors the PyTorch safe ops raise their epsilons to."""

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch.ops._precision import (  # noqa: E402
    at_least,
    machine_epsilon,
    smallest_normal,
)


@pytest.mark.parametrize(
    ("dtype", "epsilon", "normal"),
    [
        (torch.float16, 2.0**-10, 2.0**-14),
        (torch.bfloat16, 2.0**-7, 2.0**-126),
        (torch.float32, 2.0**-23, 2.0**-126),
        (torch.float64, 2.0**-52, 2.0**-1022),
    ],
)
def test_epsilons_are_those_of_the_ieee_formats(dtype, epsilon, normal):
    assert machine_epsilon(dtype) == epsilon
    assert smallest_normal(dtype) == normal
    assert float(torch.tensor(1.0 - epsilon, dtype=dtype)) < 1.0
    assert float(torch.tensor(normal, dtype=dtype)) > 0.0


def test_at_least_raises_to_the_floor_and_none_means_the_floor():
    assert at_least(None, 0.5) == 0.5
    assert at_least(0.1, 0.5) == 0.5
    assert at_least(0.7, 0.5) == 0.7
