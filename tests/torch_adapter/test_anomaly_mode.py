"""Anomaly mode left off while the doctor watches: both spellings accepted, nothing turned
on, said once, and torch's own functions given back after."""

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch_adapter.hooks import anomaly_mode  # noqa: E402
from gradient_doctor.torch_adapter.hooks.anomaly_mode import AnomalyModeLeftOff  # noqa: E402


def test_anomaly_mode_stays_off_in_every_spelling_and_comes_back_after(capsys, monkeypatch):
    monkeypatch.setattr(anomaly_mode._LeftOff, "_said", False)
    originals = (torch.autograd.set_detect_anomaly, torch.autograd.detect_anomaly)
    left_off = AnomalyModeLeftOff()
    left_off.install()
    left_off.install()  # a second install (the rerun's, in a fork) changes nothing
    try:
        torch.autograd.set_detect_anomaly(True)
        assert not torch.is_anomaly_enabled()
        with torch.autograd.detect_anomaly():
            assert not torch.is_anomaly_enabled()
        with torch.autograd.set_detect_anomaly(True, check_nan=True):
            assert not torch.is_anomaly_enabled()

        @torch.autograd.detect_anomaly()
        def step():
            return torch.is_anomaly_enabled()

        assert step() is False
    finally:
        left_off.uninstall()
    assert (torch.autograd.set_detect_anomaly, torch.autograd.detect_anomaly) == originals
    assert capsys.readouterr().err.count("anomaly detection is left off") == 1
    with torch.autograd.detect_anomaly():  # torch's own again
        assert torch.is_anomaly_enabled()
