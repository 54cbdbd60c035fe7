"""The seeded rerun of an unchanged script: an unseeded script whose failing step depends on
its draws (torch's, Python's and NumPy's) is rerun from its start, in a fork made before it
ran and in a fresh interpreter given the generators' states: both draw exactly what the run
drew, and reproduce that step."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.cli.script_runner import run_script  # noqa: E402
from gradient_doctor.torch_adapter.script_adapter import ScriptAdapter  # noqa: E402

# No seed anywhere: which step fails depends on the process's own draws. Each step's
# draws are appended to a file, by the run and then by its rerun.
_UNSEEDED = """
import random
import numpy
import torch

scale = torch.nn.Parameter(torch.tensor(2.0))
optimizer = torch.optim.SGD([scale], lr=0.01)
for step in range(200):
    noise = torch.randn(8) + random.gauss(0, 0.3) + float(numpy.random.normal(0, 0.3))
    with open("draws.txt", "a") as log:
        print(step, noise.tolist(), file=log)
    spread = torch.sqrt(scale + noise)
    loss = (spread.mean() - 1.0) ** 2
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize("start", ["fork", "fresh interpreter"])
def test_an_unseeded_scripts_failing_step_is_reproduced_by_its_rerun(start, tmp_path, monkeypatch):
    script = tmp_path / "unseeded.py"
    script.write_text(_UNSEEDED)
    monkeypatch.chdir(tmp_path)
    adapter = ScriptAdapter(script.name, [], trial_steps=0)
    with monkeypatch.context() as patched:
        if start != "fork":
            patched.delattr(os, "fork")
        adapter.install()
    try:
        outcome = run_script(script.name, [])
    finally:
        adapter.uninstall()
    assert outcome.stopped
    (finding,) = adapter.session.problems
    assert finding.category == "forward_domain", finding.explanation
    assert (finding.origin.op, finding.origin.source.line) == ("Sqrt", 12)
    assert finding.origin.inputs[0].min < 0  # the draw that failed, drawn again
    assert len(adapter.rerun_seconds) == 1
    # The rerun drew, step by step up to the failing one, exactly what the run drew.
    draws = (tmp_path / "draws.txt").read_text().splitlines()
    steps = finding.step + 1
    assert len(draws) == 2 * steps and draws[:steps] == draws[steps:]
