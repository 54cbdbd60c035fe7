"""The script's own finiteness tests, followed while the doctor watches: only a test from
the user's code that finds a loss-like scalar (or a number) not finite is handed on, with
what its caller held; everything is given back after."""

import math
import sys

import numpy
import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.core.finiteness_tests import FinitenessTests  # noqa: E402
from gradient_doctor.torch_adapter.hooks.script_hooks import FINITENESS_TESTS  # noqa: E402

_NAMES = ("isnan", "isinf", "isfinite")


def _originals():
    owners = (torch, torch.Tensor, math, numpy)
    return [getattr(owner, name) for name in _NAMES for owner in owners]


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


def test_a_loss_compared_with_itself_and_numpys_tests_of_a_number_are_followed():
    found = []
    tests = FinitenessTests(found.append, FINITENESS_TESTS)
    tests.install()
    try:
        weight = torch.tensor(2.0, requires_grad=True)
        healthy, broken = weight * 3.0, weight * math.nan
        assert not (healthy != healthy) and bool(healthy != broken)  # not a self-test
        assert found == []
        assert bool(broken != broken)  # true only for NaN
        assert found == [[broken]]
        found.clear()
        assert not numpy.isnan(float(healthy.detach()))
        loss_value = broken.item()
        assert numpy.isnan(loss_value) and not numpy.isfinite(loss_value)
        assert len(found) == 2 and any(held is broken for held in found[0])
        # An array's test, and the ufunc's own attributes, are NumPy's as they were.
        found.clear()
        answers = numpy.isnan(numpy.array([1.0, math.nan]), where=True)
        assert answers.tolist() == [False, True] and found == []
        assert numpy.isinf.nin == 1 and numpy.isfinite.__name__ == "isfinite"
    finally:
        tests.uninstall()
    assert "__ne__" not in vars(torch.Tensor)  # inherited again, not left as an attribute
    assert isinstance(numpy.isnan, numpy.ufunc)


# The gradients' norm tested after backward(), the update skipped when it is not finite.
# A batch of identical rows gives a root of 0 summed squares, whose gradient is NaN.
_SKIPS_ON_NORM = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
SCALER
inputs = torch.randn(32, 4)
inputs[16:24] = 0.0
for step in range(4):
    out = model(inputs[step * 8 : step * 8 + 8])
    loss = torch.sqrt((out - out.mean(dim=0)).pow(2).sum(dim=1)).mean()
    optimizer.zero_grad()
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not torch.isfinite(norm):
        continue
    optimizer.step()
"""


@pytest.mark.parametrize("scaler", ["", "scaler = torch.amp.GradScaler('cpu')"])
def test_a_norm_test_after_backward_fails_the_step_unless_a_grad_scaler_skips_on_purpose(
    scaler, tmp_path, monkeypatch
):
    from gradient_doctor.cli.script_runner import run_script
    from gradient_doctor.torch_adapter.script_adapter import ScriptAdapter

    script = tmp_path / "skips_on_norm.py"
    script.write_text(_SKIPS_ON_NORM.replace("SCALER", scaler))
    monkeypatch.chdir(tmp_path)
    adapter = ScriptAdapter(script.name, [], trial_steps=0)
    adapter.install()
    try:
        outcome = run_script(script.name, [])
    finally:
        adapter.uninstall()
    if scaler:  # a GradScaler's script skips overflowing steps on purpose: not flagged
        assert not outcome.stopped and adapter.session.problems == []
        return
    assert outcome.stopped
    (finding,) = adapter.session.problems
    assert (finding.step, finding.category, finding.phase) == (
        2,
        "backward_singularity",
        "backward",
    )
    assert finding.origin.gradient_of == "Sqrt"


def test_a_module_imported_while_watching_sees_numpys_own_ufuncs(tmp_path, monkeypatch):
    # TensorFlow imported after torch loads ml_dtypes, whose C code registers loops on
    # numpy.isfinite and read the stand-in as a ufunc: the import failed.
    (tmp_path / "reads_ufuncs.py").write_text(
        "import numpy\nseen = [isinstance(numpy.isfinite, numpy.ufunc)]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    tests = FinitenessTests(lambda held: None, FINITENESS_TESTS)
    tests.install()
    try:
        import reads_ufuncs

        assert reads_ufuncs.seen[0]
        assert not isinstance(numpy.isfinite, numpy.ufunc)  # followed again after the import
    finally:
        tests.uninstall()
        sys.modules.pop("reads_ufuncs", None)
    assert isinstance(numpy.isfinite, numpy.ufunc)
