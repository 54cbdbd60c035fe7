"""The seeded rerun of an unchanged script: an unseeded script whose failing step depends on
its draws (torch's, Python's and NumPy's) is rerun from its start, in a fork made before it
ran and in a fresh interpreter given the generators' states: both draw exactly what the run
drew, and reproduce that step, in a scratch copy of the folder (the log the script appends
to in its folder holds what one run wrote)."""

from __future__ import annotations

import os
import sys
import threading
import types

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.cli.script_runner import run_script  # noqa: E402
from gradient_doctor.torch_adapter.script_adapter import ScriptAdapter  # noqa: E402

# No seed anywhere: which step fails depends on the process's own draws. Each step's
# draws are appended to a file in the script's folder (the rerun's is in its copy) and
# to the file named by an environment variable, outside the folder, by the run and then
# its rerun. (A file named by an argument there would be put back after the rerun.)
_UNSEEDED = """
import os
import random
import sys
import numpy
import torch

scale = torch.nn.Parameter(torch.tensor(2.0))
optimizer = torch.optim.SGD([scale], lr=0.01)
for step in range(200):
    noise = torch.randn(8) + random.gauss(0, 0.3) + float(numpy.random.normal(0, 0.3))
    for path in ("draws.txt", os.environ["BOTH_RUNS"]):
        with open(path, "a") as log:
            print(step, noise.tolist(), file=log)
    spread = torch.sqrt(scale + noise)
    loss = (spread.mean() - 1.0) ** 2
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def _line(source: str, text: str) -> int:
    """The 1-based line of `source` holding `text`."""
    (number,) = [n for n, line in enumerate(source.splitlines(), 1) if text in line]
    return number


@pytest.mark.parametrize("start", ["fork", "fresh interpreter"])
def test_an_unseeded_scripts_failing_step_is_reproduced_by_its_rerun(start, tmp_path, monkeypatch):
    folder, both = tmp_path / "folder", str(tmp_path / "both_runs.txt")
    folder.mkdir()
    script = folder / "unseeded.py"
    script.write_text(_UNSEEDED)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("BOTH_RUNS", both)
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
    line = _line(_UNSEEDED, "spread = torch.sqrt(scale + noise)")
    assert (finding.origin.op, finding.origin.source.line) == ("Sqrt", line)
    assert finding.origin.inputs[0].min < 0  # the draw that failed, drawn again
    assert len(adapter.rerun_seconds) == 1
    # The rerun drew, step by step up to the failing one, exactly what the run drew.
    draws = (tmp_path / "both_runs.txt").read_text().splitlines()
    steps = finding.step + 1
    assert len(draws) == 2 * steps and draws[:steps] == draws[steps:]
    assert (folder / "draws.txt").read_text().splitlines() == draws[:steps]


# The first step fails: the rerun records from the script's start, the model made inside it.
_FIRST_STEP = """
import torch
from torch import nn


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 1)
        nn.init.constant_(self.linear.bias, -1.0)

    def forward(self, x):
        return torch.log(torch.relu(self.linear(x)))


model = Head()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.zeros(4, 2)).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_failing_first_step_is_recorded_from_the_scripts_start(tmp_path, monkeypatch):
    script = tmp_path / "first_step.py"
    script.write_text(_FIRST_STEP)
    monkeypatch.chdir(tmp_path)
    adapter = ScriptAdapter(script.name, [], trial_steps=0)
    adapter.install()
    try:
        assert run_script(script.name, []).stopped
    finally:
        adapter.uninstall()
    (finding,) = adapter.session.problems
    assert (finding.step, finding.category, finding.phase) == (0, "forward_domain", "forward")
    origin = finding.origin
    line = _line(_FIRST_STEP, "return torch.log(torch.relu(self.linear(x)))")
    assert (origin.op, origin.layer, origin.source.line) == ("Log", "Head", line)
    assert origin.inputs[0].zeros == 4 and origin.outputs[0].neg_inf == 4


# Two models, each with its optimizer; at step 2, between the generator's update and the
# critic's forward, the critic's head is pushed to where its hand-written log-sigmoid is
# log(0): the op is named by its module's path, the model's class first.
_TWO_MODELS = """
import torch
from torch import nn


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, h):
        return torch.log(torch.sigmoid(self.linear(h)))


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(2, 4)
        self.head = Head()

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(2, 2)

    def forward(self, z):
        return self.net(z)


torch.manual_seed(0)
generator, critic = Generator(), Critic()
g_optimizer = torch.optim.SGD(generator.parameters(), lr=0.1)
c_optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
for step in range(4):
    g_loss = -critic(generator(torch.randn(8, 2))).mean()
    g_optimizer.zero_grad()
    g_loss.backward()
    g_optimizer.step()
    if step == 2:
        with torch.no_grad():
            critic.head.linear.bias.fill_(-200.0)
    c_loss = critic(generator(torch.randn(8, 2)).detach()).mean()
    c_optimizer.zero_grad()
    c_loss.backward()
    c_optimizer.step()
"""


def test_two_models_ops_are_named_by_their_module_path(tmp_path, monkeypatch):
    script = tmp_path / "two_models.py"
    script.write_text(_TWO_MODELS)
    monkeypatch.chdir(tmp_path)
    adapter = ScriptAdapter(script.name, [], trial_steps=0)
    adapter.install()
    try:
        assert run_script(script.name, []).stopped
    finally:
        adapter.uninstall()
    (finding,) = adapter.session.problems
    assert finding.step == 2  # one step per round of the two optimizers
    origin = finding.origin
    line = _line(_TWO_MODELS, "return torch.log(torch.sigmoid(self.linear(h)))")
    assert (origin.op, origin.layer, origin.source.line) == ("Log", "critic.head", line)
    assert origin.inputs[0].zeros == 8 and origin.outputs[0].neg_inf == 8


# A lock another thread of the doctor's process holds when install forks (torch's generator
# lock, held by a thread drawing, in the case this stands for): the fork copies it held,
# with no owner to release it. The script takes it at its start when it is there to take.
_TAKES_A_LOCK = (
    """
import sys
held = sys.modules.get("held_at_fork")
if held is not None:
    with held.lock:
        pass
"""
    + _FIRST_STEP
)


def test_a_rerun_forked_while_another_thread_held_a_lock_runs_again_in_a_new_interpreter(
    tmp_path, monkeypatch, capfd
):
    from gradient_doctor.torch_adapter.rerun import step_rerun

    monkeypatch.setattr(step_rerun, "STALL_SECONDS", 2.0)
    held = types.ModuleType("held_at_fork")
    held.lock = threading.Lock()
    monkeypatch.setitem(sys.modules, "held_at_fork", held)
    script = tmp_path / "takes_a_lock.py"
    script.write_text(_TAKES_A_LOCK)
    monkeypatch.chdir(tmp_path)
    taken, release = threading.Event(), threading.Event()

    def hold_the_lock():
        with held.lock:
            taken.set()
            release.wait()

    holder = threading.Thread(target=hold_the_lock, daemon=True)
    holder.start()
    try:
        assert taken.wait(60)
        adapter = ScriptAdapter(script.name, [], trial_steps=0)
        adapter.install()  # forks while the holder holds the lock
    finally:
        release.set()
        holder.join()
    try:
        assert run_script(script.name, []).stopped
    finally:
        adapter.uninstall()
    assert "used no CPU for 2 s" in capfd.readouterr().err
    (finding,) = adapter.session.problems
    line = _line(_TAKES_A_LOCK, "return torch.log(torch.relu(self.linear(x)))")
    assert (finding.origin.op, finding.origin.source.line) == ("Log", line)
