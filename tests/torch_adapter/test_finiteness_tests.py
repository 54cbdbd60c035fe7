"""The script's own finiteness tests, followed while the doctor watches: only a test from
the user's code that finds a loss-like scalar (or a number) not finite is handed on, with
what its caller held; everything is given back after."""

import math

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.core.finiteness_tests import FinitenessTests  # noqa: E402
from gradient_doctor.torch_adapter.hooks.script_hooks import FINITENESS_TESTS  # noqa: E402

_NAMES = ("isnan", "isinf", "isfinite")


def _originals():
    return [getattr(owner, name) for name in _NAMES for owner in (torch, torch.Tensor, math)]


def test_only_a_test_that_finds_a_nonfinite_loss_or_number_is_handed_on():
    found = []
    originals = _originals()
    tests = FinitenessTests(found.append, FINITENESS_TESTS)
    tests.install()
    try:
        weight = torch.tensor(2.0, requires_grad=True)
        healthy = weight * 3.0
        assert not torch.isnan(healthy) and torch.isfinite(healthy) and not healthy.isinf()
        scores = (weight * torch.ones(2, 2)).masked_fill(torch.eye(2, dtype=bool), -math.inf)
        assert bool(torch.isinf(scores).any())  # a mask of -inf scores: by design, unread
        assert torch.isnan(torch.tensor(math.nan))  # no autograd history: a metric
        assert found == []
        broken = weight * math.inf
        assert not torch.isfinite(broken)
        assert found == [[broken]]
        loss_value = float(broken.detach())
        assert math.isinf(loss_value)  # a number: the caller's values are handed on
        assert any(held is broken for held in found[1])
        assert any(held is loss_value for held in found[1])
    finally:
        tests.uninstall()
    assert _originals() == originals
