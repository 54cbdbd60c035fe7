"""Broken gradient paths under `gradient-doctor run`: unchanged scripts, in several styles,
whose optimizers step with parameters left without a gradient. The cheap count at each
update trips once per new set; the seeded rerun records that step under the path
recorder and hands its record back as JSON; the break is named by op and line. A whole
optimizer cut off stops training; a part of one is recorded and training goes on."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.cli.script_runner import run_script  # noqa: E402
from gradient_doctor.core.findings import SourceLine  # noqa: E402
from gradient_doctor.render.json_report import report_to_dict  # noqa: E402
from gradient_doctor.torch_adapter.rerun import step_events  # noqa: E402
from gradient_doctor.torch_adapter.rerun.step_events import CutPaths, RecordedStep  # noqa: E402
from gradient_doctor.torch_adapter.script_adapter import ScriptAdapter  # noqa: E402

# A GAN trainer class: the generator's tokens are the top-1 index of its scores.
_TRAINER_TOPK = """
import torch
from torch import nn


class Trainer:
    def __init__(self):
        torch.manual_seed(3)
        self.gen = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 6))
        self.critic = nn.Sequential(nn.Embedding(6, 8), nn.Flatten(), nn.Linear(8, 1))
        self.opt_c = torch.optim.SGD(self.critic.parameters(), lr=0.01)
        self.opt_g = torch.optim.SGD(self.gen.parameters(), lr=0.01)

    def step(self, real):
        fake = self.gen(torch.randn(real.shape[0], 4)).topk(1, dim=1).indices
        self.opt_c.zero_grad()
        c_loss = self.critic(fake).mean() - self.critic(real).mean()
        c_loss.backward()
        self.opt_c.step()
        self.opt_g.zero_grad()
        g_loss = -self.critic(fake).mean()
        g_loss.backward()
        self.opt_g.step()
        return g_loss.item()


trainer = Trainer()
for i in range(30):
    print(i, trainer.step(torch.randint(0, 6, (8, 1))))
"""

# A module-level loop: the stem's output detached in the middle of the forward.
_PARTIAL_DETACH = """
import torch
import torch.nn.functional as F

torch.manual_seed(0)
stem = torch.nn.Linear(5, 8)
head = torch.nn.Linear(8, 1)
optimizer = torch.optim.Adam([*stem.parameters(), *head.parameters()], lr=1e-2)
x, y = torch.randn(64, 5), torch.randn(64, 1)
for step in range(12):
    h = torch.relu(stem(x)).detach()
    loss = F.mse_loss(head(h), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(step, loss.item())
"""

# A function loop: the error leaves torch as a list and comes back through torch.tensor.
_TOLIST_ROUND_TRIP = """
import torch


def train(steps):
    torch.manual_seed(1)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(steps):
        x = torch.randn(16, 3)
        errors = (net(x) - 1.0).pow(2).mean(dim=0).tolist()
        loss = torch.tensor(errors, requires_grad=True).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


train(20)
"""

# A DQN's target network, frozen and outside the optimizer; nothing is cut.
_HEALTHY_TARGET = """
import copy
import torch

torch.manual_seed(2)
q = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
target = copy.deepcopy(q).requires_grad_(False)
opt = torch.optim.Adam(q.parameters(), lr=1e-3)
for step in range(15):
    s, s2 = torch.randn(32, 4), torch.randn(32, 4)
    with torch.no_grad():
        goal = 1.0 + 0.9 * target(s2).max(dim=1).values
    loss = (q(s).max(dim=1).values - goal).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 4:
        target.load_state_dict(q.state_dict())
"""


def _line(source: str, text: str) -> int:
    """The 1-based line of `source` holding `text`."""
    (number,) = [n for n, line in enumerate(source.splitlines(), 1) if text in line]
    return number


def _run(source: str, tmp_path, monkeypatch):
    """Run `source` as `gradient-doctor run` runs a script: the adapter and its outcome."""
    script = tmp_path / "train.py"
    script.write_text(source)
    monkeypatch.chdir(tmp_path)
    adapter = ScriptAdapter(script.name, [], trial_steps=0)
    adapter.install()
    try:
        outcome = run_script(script.name, [])
        adapter.finish()
    finally:
        adapter.uninstall()
    return adapter, outcome


def _problems(adapter) -> list[dict]:
    return json.loads(json.dumps(report_to_dict(adapter.report("train.py"))))["problems"]


def test_a_generator_cut_at_topk_indices_stops_training_at_its_first_step(tmp_path, monkeypatch):
    adapter, outcome = _run(_TRAINER_TOPK, tmp_path, monkeypatch)
    assert outcome.stopped and outcome.error is None
    assert adapter.session.steps_watched == 1  # stopped at the next step's first update
    assert len(adapter.rerun_seconds) == 1
    (problem,) = _problems(adapter)  # the critic's optimizer is not flagged
    assert problem["category"] == "disconnected_gradients"
    assert problem["step"] == 0
    cut = problem["disconnected"]
    assert cut["all"] is True
    assert cut["variables"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    line = _line(_TRAINER_TOPK, ".topk(1, dim=1).indices")
    assert (cut["break"]["op"], cut["break"]["file"], cut["break"]["line"]) == (
        "TopKV2",
        "train.py",
        line,
    )
    families = {fix["family"] for fix in problem["fixes"]}
    assert {"gumbel_softmax", "straight_through"} <= families
    assert "tf." not in json.dumps(problem["fixes"])
    assert adapter.report().status == "problem"


def test_a_partial_cut_is_recorded_once_and_training_goes_on_as_unwatched(
    tmp_path, monkeypatch, capfd
):
    adapter, outcome = _run(_PARTIAL_DETACH, tmp_path, monkeypatch)
    watched = capfd.readouterr().out
    assert not outcome.stopped and outcome.error is None
    assert adapter.session.steps_watched == 12
    assert len(adapter.rerun_seconds) == 1  # the same set every step: one rerun
    (problem,) = _problems(adapter)
    # Reported at the third update (a part never trained is noted after NEW_CUT_UPDATES),
    # when both roots (two `Linear`s called apart) are known: each named by the script's
    # own name for it (not "Linear" and "Linear_1").
    assert problem["disconnected"]["variables"] == ["stem.weight", "stem.bias"]
    assert problem["disconnected"]["all"] is False
    point = problem["disconnected"]["break"]
    assert (point["op"], point["line"]) == (
        "StopGradient",
        _line(_PARTIAL_DETACH, "h = torch.relu(stem(x)).detach()"),
    )
    # Watching and the rerun changed nothing the script computes.
    namespace: dict = {}
    exec(compile(_PARTIAL_DETACH, "plain.py", "exec"), namespace)
    assert capfd.readouterr().out == watched


def test_a_tolist_round_trip_is_named_at_the_tolist_line_and_where_it_came_back(
    tmp_path, monkeypatch
):
    adapter, outcome = _run(_TOLIST_ROUND_TRIP, tmp_path, monkeypatch)
    assert outcome.stopped
    (problem,) = _problems(adapter)
    assert problem["disconnected"]["all"] is True
    assert problem["disconnected"]["variables"] == ["weight", "bias"]
    point = problem["disconnected"]["break"]
    line = _line(_TOLIST_ROUND_TRIP, "errors = (net(x) - 1.0).pow(2).mean(dim=0).tolist()")
    assert (point["op"], point["line"]) == ("ToList", line)
    back = _line(_TOLIST_ROUND_TRIP, "loss = torch.tensor(errors, requires_grad=True).sum()")
    assert f"train.py:{back}" in problem["explanation"]


def test_a_frozen_target_network_is_not_flagged_and_costs_no_rerun(tmp_path, monkeypatch):
    adapter, outcome = _run(_HEALTHY_TARGET, tmp_path, monkeypatch)
    assert not outcome.stopped and outcome.error is None
    assert adapter.session.steps_watched == 15
    assert adapter.rerun_seconds == []
    assert _problems(adapter) == []
    assert adapter.report().status == "healthy"


def test_the_paths_of_a_recorded_step_cross_the_process_boundary_as_json(tmp_path):
    line = SourceLine("train.py", 7, "rows = x.tolist()", column=7, end_column=17)
    paths = CutPaths(
        grad_enabled={0: True, 3: False},
        carries={0: (True,), 3: (False, True)},
        exits=((2, "tolist", 5, line), (4, "numpy", 6, None)),
        parameters=("stem.weight", "stem.bias"),
        loss_ids=(9,),
    )
    path = tmp_path / "step.json"
    step_events.write(str(path), RecordedStep(True, paths=paths))
    assert step_events.read(str(path)).paths == paths
    step_events.write(str(path), RecordedStep(True))
    assert step_events.read(str(path)).paths is None
