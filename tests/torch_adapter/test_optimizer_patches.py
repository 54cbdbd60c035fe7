"""PyTorch optimizer fixes as patches: the line that built the optimizer or its scheduler,
a clip before step().

Each script trains a tiny real model a few steps while `OptimizerSites` notes its
lines, as under `gradient-doctor run`; the fixes are placed as the session places
them, and the patched script is run again to see that it does what the patch says
(the learning rate the optimizer is built with or its scheduler sets, the tensors
the clip line clips).
"""

import linecache
import runpy
import textwrap

import pytest
import torch

from gradient_doctor.core.evidence import Evidence, StepHistory, TrainingSetup
from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.fix_placement import FixSites, place_fixes
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.patches import apply_unified_diff
from gradient_doctor.torch_adapter.hooks.optimizer_sites import OptimizerSites
from gradient_doctor.torch_adapter.trials.trial_plans import plan_for

# The gradient norms of the healthy steps: the clip bound is their median, 0.25.
HISTORY = StepHistory(steps=(0, 1, 2, 3, 4), grad_norms=(0.5, 0.25, 0.125, 1.0, 0.2))

MODULE_LOOP = """
import torch

torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
for _ in range(3):
    loss = model(torch.randn(8, 3)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
OPTIMIZER = optimizer
"""

FUNCTION_FROM_IMPORTS = """
import torch.nn.functional as F
from torch import nn, optim, randn


def train():
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = optim.Adam(net.parameters(), 1e-2)
    for _ in range(3):
        x = randn(8, 3)
        loss = F.mse_loss(net(x), x[:, :1])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return opt


OPTIMIZER = train()
"""

DEFAULT_RATE_ARGS = """
import argparse

import torch
from torch.optim import AdamW

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.03)
args = parser.parse_args([])
model = torch.nn.Linear(3, 1)
params = list(model.parameters())
plain = AdamW(params)
tuned = torch.optim.SGD(
    model.parameters(),
    lr=args.lr,
    momentum=0.9,
)
for opt in (plain, tuned):
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    opt.zero_grad()
OPTIMIZERS = (plain, tuned)
"""

CLASS_METHOD = """
import torch

LEARNING_RATE = 0.2


class Trainer:
    def __init__(self):
        self.model = torch.nn.Linear(3, 1)
        self.opt = torch.optim.RMSprop(self.model.parameters(), lr=LEARNING_RATE)

    def fit(self, steps):
        for _ in range(steps):
            loss = self.model(torch.randn(4, 3)).pow(2).sum()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()


trainer = Trainer()
trainer.fit(3)
OPTIMIZER = trainer.opt
"""

# Lightning's way: the model builds its optimizer over `self.parameters()`, and a
# trainer of another class steps it; the trainer's `self` has no `parameters()`.
OTHER_CLASS_STEPS = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


class Trainer:
    def fit(self, model, steps):
        opt = model.configure_optimizers()
        for _ in range(steps):
            opt.zero_grad()
            model.net(torch.randn(4, 3)).pow(2).sum().backward()
            opt.step()
        return opt


OPTIMIZER = Trainer().fit(Model(), 3)
"""

ELSEWHERE_STEPPED = """
import torch


def update(optimizer, loss):
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def main():
    net = torch.nn.Linear(3, 1)
    weights = net.parameters()  # a generator: empty when read again
    opt = torch.optim.SGD(weights, lr=0.1)
    for _ in range(2):
        update(opt, net(torch.ones(2, 3)).sum())
    return opt


OPTIMIZER = main()
"""

INLINE_GROUPS = """
import torch

body, head = torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)
opt = torch.optim.SGD(
    [{"params": body.parameters()}, {"params": head.parameters(), "lr": 0.01}], lr=0.1
)
for _ in range(2):
    head(body(torch.ones(2, 3))).sum().backward()
    opt.step()
OPTIMIZER = opt
"""

EVERY_GROUP_RATED = """
import torch

body, head = torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)
opt = torch.optim.SGD(
    [{"params": body.parameters(), "lr": 0.3}, {"params": head.parameters(), "lr": 0.5}],
    momentum=0.9,
)
for _ in range(2):
    head(body(torch.ones(2, 3))).sum().backward()
    opt.step()
OPTIMIZER = opt
"""

PARAM_GROUPS = """
import torch

body, head = torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)
groups = [{"params": body.parameters()}, {"params": head.parameters(), "lr": 0.01}]
opt = torch.optim.SGD(groups, lr=0.1)
for _ in range(2):
    head(body(torch.ones(2, 3))).sum().backward()
    opt.step()
OPTIMIZER = opt
"""

ALREADY_CLIPS = """
import torch
from torch.nn.utils import clip_grad_norm_

model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.ones(2, 3)).sum().backward()
    clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
OPTIMIZER = opt
"""

NO_TORCH_NAME = """
import torch.nn.functional as F
from torch.nn import Linear
from torch.optim import SGD

model = Linear(3, 1)
opt = SGD(model.parameters(), lr=0.1)
for _ in range(2):
    F.mse_loss(model(model.weight.detach()), model.weight.detach()[:, :1]).backward()
    opt.step()
OPTIMIZER = opt
"""


ONE_CYCLE = """
import torch

CONFIG = {"max_lr": 2.0}


class Trainer:
    def __init__(self, cfg):
        self.model = torch.nn.Linear(3, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.sched = torch.optim.lr_scheduler.OneCycleLR(
            self.opt, max_lr=cfg["max_lr"], total_steps=10, pct_start=0.5, div_factor=10,
            anneal_strategy="linear",
        )

    def fit(self, steps):
        for _ in range(steps):
            self.model(torch.ones(2, 3)).sum().backward()
            self.opt.step()
            self.opt.zero_grad()
            self.sched.step()


trainer = Trainer(CONFIG)
trainer.fit(2)
OPTIMIZER = trainer.opt
"""

ONE_CYCLE_POSITIONAL = """
from torch import nn, ones, optim

model = nn.Linear(3, 1)
opt = optim.Adam(model.parameters(), lr=1e-3)
sched = optim.lr_scheduler.OneCycleLR(opt, 3, total_steps=10)
model(ones(2, 3)).sum().backward()
opt.step()
sched.step()
OPTIMIZER = opt
"""

CYCLIC_GROUPS = """
import torch

body, head = torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)
opt = torch.optim.SGD([{"params": body.parameters()}, {"params": head.parameters()}], lr=0.1)
sched = torch.optim.lr_scheduler.CyclicLR(opt, base_lr=[0.01, 0.02], max_lr=[0.1, 0.2])
head(body(torch.ones(2, 3))).sum().backward()
opt.step()
sched.step()
OPTIMIZER = opt
"""

WARM_UP_THEN_COSINE = """
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR

PEAK, FLOOR = 0.5, 0.01
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=PEAK)
sched = SequentialLR(
    opt,
    [LinearLR(opt, start_factor=0.1, total_iters=2), CosineAnnealingLR(opt, 5, FLOOR)],
    milestones=[2],
)
restarts = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=4, eta_min=0)
for _ in range(3):
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    sched.step()
OPTIMIZER = opt
"""

ONE_CYCLE_SUBCLASS = """
import torch


class Warm(torch.optim.lr_scheduler.OneCycleLR):
    def __init__(self, optimizer, peak):
        super().__init__(optimizer, max_lr=peak, total_steps=10)


model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = Warm(opt, 2.0)
OPTIMIZER = opt
"""


def _recorded(
    tmp_path, monkeypatch, source: str, name: str = "train.py"
) -> tuple[dict, OptimizerSites]:
    """Run `source` as the script `name` in `tmp_path` with the lines noted."""
    (tmp_path / name).write_text(textwrap.dedent(source).lstrip())
    monkeypatch.chdir(tmp_path)
    linecache.checkcache()  # another test's `train.py` may be cached under the same name
    sites = OptimizerSites()
    sites.install()
    try:
        namespace = runpy.run_path(name, run_name="__main__")
    finally:
        sites.uninstall()
    return namespace, sites


def _placed(sites: OptimizerSites, optimizer, root) -> dict:
    """The optimizer fixes of an exploding-gradients finding, placed on `optimizer`'s lines."""
    setup = TrainingSetup(
        learning_rate=optimizer.defaults["lr"], framework="torch", optimizer="SGD"
    )
    finding = Finding(
        "exploding_gradients",
        5,
        "forward",
        None,
        "",
        fixes=(remedies.lower_learning_rate(setup), remedies.gradient_clipping(setup)),
    )
    placed = place_fixes(
        finding, root=str(root), sites=FixSites(optimizer=sites.site(optimizer)), history=HISTORY
    )
    return {fix.family: fix for fix in placed.fixes}


def _run_patched(tmp_path, patch: str, name: str = "train.py") -> dict:
    """Apply `patch` to the script and run it; its namespace."""
    (tmp_path / name).write_text(apply_unified_diff(patch, str(tmp_path))[name])
    return runpy.run_path(name, run_name="__main__")


def _added(patch: str) -> list[str]:
    return [line[1:] for line in patch.splitlines() if line.startswith("+") and line[1:2] != "+"]


@pytest.fixture
def clipped(monkeypatch):
    """Each call of `torch.nn.utils.clip_grad_norm_` (the real one runs): the ids of
    the tensors it clipped and its bound."""
    calls = []
    real = torch.nn.utils.clip_grad_norm_

    def spy(parameters, max_norm, *args, **kwargs):
        parameters = list(parameters)
        calls.append(({id(p) for p in parameters}, max_norm))
        return real(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    return calls


def _parameter_ids(optimizer) -> set[int]:
    return {id(p) for group in optimizer.param_groups for p in group["params"]}


def test_a_literal_rate_is_divided_and_the_clip_goes_before_the_step(
    tmp_path, monkeypatch, clipped
):
    namespace, sites = _recorded(tmp_path, monkeypatch, MODULE_LOOP)
    fixes = _placed(sites, namespace["OPTIMIZER"], tmp_path)
    lower, clip = fixes["lower_learning_rate"], fixes["gradient_clipping"]
    assert _added(lower.patch) == ["optimizer = torch.optim.SGD(model.parameters(), lr=0.05)"]
    assert lower.trial_setting == ("learning_rate_scale", pytest.approx(0.1))
    assert _added(lower.stronger.patch) == [
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.005)"
    ]
    assert lower.title == "Lower the learning rate 10x, from 0.5 to 0.05"
    assert _added(clip.patch) == [
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.25)"
    ]
    assert clip.trial_setting == ("clip_grad_norm", 0.25)
    assert "-    optimizer.step()" not in clip.patch  # inserted, the step kept
    patched = _run_patched(tmp_path, clip.patch)
    assert clipped == [(_parameter_ids(patched["OPTIMIZER"]), 0.25)] * 3


def test_a_positional_rate_in_a_function_spelled_from_torch_imports(tmp_path, monkeypatch, clipped):
    namespace, sites = _recorded(tmp_path, monkeypatch, FUNCTION_FROM_IMPORTS)
    fixes = _placed(sites, namespace["OPTIMIZER"], tmp_path)
    lower, clip = fixes["lower_learning_rate"], fixes["gradient_clipping"]
    assert _added(lower.patch) == ["    opt = optim.Adam(net.parameters(), 0.001)"]
    assert _run_patched(tmp_path, lower.patch)["OPTIMIZER"].defaults["lr"] == 0.001
    (tmp_path / "train.py").write_text(textwrap.dedent(FUNCTION_FROM_IMPORTS).lstrip())
    assert _added(clip.patch) == [
        "        nn.utils.clip_grad_norm_(net.parameters(), max_norm=0.25)"
    ]
    patched = _run_patched(tmp_path, clip.patch)
    assert clipped == [(_parameter_ids(patched["OPTIMIZER"]), 0.25)] * 3


def test_a_missing_rate_is_written_as_the_class_default_divided(tmp_path, monkeypatch):
    namespace, sites = _recorded(tmp_path, monkeypatch, DEFAULT_RATE_ARGS)
    plain, _ = namespace["OPTIMIZERS"]
    lower = _placed(sites, plain, tmp_path)["lower_learning_rate"]
    default = torch.optim.AdamW([torch.zeros(1, requires_grad=True)]).defaults["lr"]
    assert _added(lower.patch) == [f"plain = AdamW(params, lr={default * 0.1:.4g})"]
    assert _added(lower.stronger.patch) == [f"plain = AdamW(params, lr={default * 0.01:.4g})"]
    patched = _run_patched(tmp_path, lower.patch)["OPTIMIZERS"][0]
    assert patched.defaults["lr"] == pytest.approx(default * 0.1)


def test_an_argument_expression_over_several_lines_is_scaled_as_written(tmp_path, monkeypatch):
    namespace, sites = _recorded(tmp_path, monkeypatch, DEFAULT_RATE_ARGS)
    _, tuned = namespace["OPTIMIZERS"]
    fixes = _placed(sites, tuned, tmp_path)
    lower = fixes["lower_learning_rate"]
    assert _added(lower.patch) == ["    lr=args.lr * 0.1,"]
    assert _added(lower.stronger.patch) == ["    lr=args.lr * 0.01,"]
    assert lower.title == "Lower the learning rate 10x, from 0.03 to 0.003"
    patched = _run_patched(tmp_path, lower.patch)["OPTIMIZERS"][1]
    assert patched.defaults["lr"] == pytest.approx(0.003)
    # Stepped in a loop over both optimizers: the clip line takes the one that steps.
    assert _added(fixes["gradient_clipping"].patch) == [
        "    torch.nn.utils.clip_grad_norm_("
        '[p for group in opt.param_groups for p in group["params"]], max_norm=0.25)'
    ]


def test_a_loop_in_a_method_clips_through_self(tmp_path, monkeypatch, clipped):
    namespace, sites = _recorded(tmp_path, monkeypatch, CLASS_METHOD)
    fixes = _placed(sites, namespace["OPTIMIZER"], tmp_path)
    assert _added(fixes["lower_learning_rate"].patch) == [
        "        self.opt = torch.optim.RMSprop(self.model.parameters(), lr=LEARNING_RATE * 0.1)"
    ]
    assert _added(fixes["gradient_clipping"].patch) == [
        "            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=0.25)"
    ]
    patched = _run_patched(tmp_path, fixes["gradient_clipping"].patch)
    assert clipped == [(_parameter_ids(patched["OPTIMIZER"]), 0.25)] * 3


def test_a_step_in_another_function_clips_the_optimizer_it_steps(tmp_path, monkeypatch, clipped):
    """`weights` is a drained generator, and not a name `update` can read: the clip
    line reads the optimizer's own param groups."""
    namespace, sites = _recorded(tmp_path, monkeypatch, ELSEWHERE_STEPPED)
    clip = _placed(sites, namespace["OPTIMIZER"], tmp_path)["gradient_clipping"]
    assert _added(clip.patch) == [
        "    torch.nn.utils.clip_grad_norm_("
        '[p for group in optimizer.param_groups for p in group["params"]], max_norm=0.25)'
    ]
    patched = _run_patched(tmp_path, clip.patch)
    assert clipped == [(_parameter_ids(patched["OPTIMIZER"]), 0.25)] * 2


def test_param_groups_are_clipped_through_the_optimizer(tmp_path, monkeypatch, clipped):
    namespace, sites = _recorded(tmp_path, monkeypatch, PARAM_GROUPS)
    fixes = _placed(sites, namespace["OPTIMIZER"], tmp_path)
    assert "opt.param_groups" in _added(fixes["gradient_clipping"].patch)[0]
    # Groups built on another line may set their own rates: no patch of the rate.
    assert fixes["lower_learning_rate"].patch is None
    patched = _run_patched(tmp_path, fixes["gradient_clipping"].patch)
    assert clipped == [(_parameter_ids(patched["OPTIMIZER"]), 0.25)] * 2


def test_param_groups_written_inline_have_each_rate_lowered(tmp_path, monkeypatch):
    namespace, sites = _recorded(tmp_path, monkeypatch, INLINE_GROUPS)
    lower = _placed(sites, namespace["OPTIMIZER"], tmp_path)["lower_learning_rate"]
    assert _added(lower.patch)[0].endswith('"lr": 0.001}], lr=0.01')
    patched = _run_patched(tmp_path, lower.patch)["OPTIMIZER"]
    assert [g["lr"] for g in patched.param_groups] == [0.01, 0.001]


def test_groups_that_each_set_their_rate_are_titled_by_them_and_get_no_constructor_rate(
    tmp_path, monkeypatch
):
    # Once titled "from 0.001 to 0.0001" (SGD's default, which no group used), with a
    # stray `lr=0.0001` added to the call.
    namespace, sites = _recorded(tmp_path, monkeypatch, EVERY_GROUP_RATED)
    lower = _placed(sites, namespace["OPTIMIZER"], tmp_path)["lower_learning_rate"]
    assert lower.title == (
        "Lower each param group's learning rate 10x, from 0.3 and 0.5 to 0.03 and 0.05"
    )
    [added] = _added(lower.patch)
    assert added.strip() == (
        '[{"params": body.parameters(), "lr": 0.03}, {"params": head.parameters(), "lr": 0.05}],'
    )
    patched = _run_patched(tmp_path, lower.patch)["OPTIMIZER"]
    assert [g["lr"] for g in patched.param_groups] == [0.03, 0.05]
    assert patched.defaults["lr"] == 0.001  # the constructor's default, untouched


def test_a_script_that_already_clips_gets_no_clipping_patch(tmp_path, monkeypatch):
    namespace, sites = _recorded(tmp_path, monkeypatch, ALREADY_CLIPS)
    fixes = _placed(sites, namespace["OPTIMIZER"], tmp_path)
    assert fixes["gradient_clipping"].patch is None
    assert fixes["lower_learning_rate"].patch is not None


def test_a_file_that_binds_no_torch_name_for_the_clip_gets_no_clipping_patch(tmp_path, monkeypatch):
    namespace, sites = _recorded(tmp_path, monkeypatch, NO_TORCH_NAME)
    fixes = _placed(sites, namespace["OPTIMIZER"], tmp_path)
    assert fixes["gradient_clipping"].patch is None
    assert _added(fixes["lower_learning_rate"].patch) == ["opt = SGD(model.parameters(), lr=0.01)"]


def test_a_one_cycle_schedule_has_its_max_lr_scaled_not_the_optimizer_lr(tmp_path, monkeypatch):
    """OneCycleLR overwrites the optimizer's `lr` every step: the patch scales the
    rate it sets, and the title names the rate in use, not the constructor's 0.1."""
    namespace, sites = _recorded(tmp_path, monkeypatch, ONE_CYCLE)
    optimizer = namespace["OPTIMIZER"]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1.1)  # 0.2 warming up to 2
    lower = _placed(sites, optimizer, tmp_path)["lower_learning_rate"]
    assert _added(lower.patch) == [
        '            self.opt, max_lr=cfg["max_lr"] * 0.1, total_steps=10, pct_start=0.5,'
        " div_factor=10,"
    ]
    assert "lr=0.1, momentum" not in "".join(_added(lower.patch))
    # Titled by what the patch scales (the schedule's own rate), with the rate in use:
    # "from 1.1 to 0.11" read as a change of the optimizer's lr, which the patch leaves.
    assert lower.title == (
        "Lower the learning rate 10x where OneCycleLR sets it (`max_lr`); it was 1.1 at the "
        "failing step"
    )
    assert lower.trial_setting == ("learning_rate_scale", 0.1)
    assert 'max_lr=cfg["max_lr"] * 0.01' in _added(lower.stronger.patch)[0]
    assert lower.stronger.title == (
        "Lower the learning rate 100x where OneCycleLR sets it (`max_lr`); it was 1.1 at "
        "the failing step"
    )
    patched = _run_patched(tmp_path, lower.patch)["OPTIMIZER"]
    assert patched.param_groups[0]["max_lr"] == pytest.approx(0.2)
    assert patched.param_groups[0]["lr"] == pytest.approx(0.11)  # every rate a tenth


def test_a_positional_max_lr_is_scaled(tmp_path, monkeypatch):
    namespace, sites = _recorded(tmp_path, monkeypatch, ONE_CYCLE_POSITIONAL)
    lower = _placed(sites, namespace["OPTIMIZER"], tmp_path)["lower_learning_rate"]
    assert _added(lower.patch) == [
        "sched = optim.lr_scheduler.OneCycleLR(opt, 0.3, total_steps=10)"
    ]
    patched = _run_patched(tmp_path, lower.patch)["OPTIMIZER"]
    assert patched.param_groups[0]["max_lr"] == pytest.approx(0.3)


def test_a_cyclic_schedule_has_both_rates_scaled_item_by_item(tmp_path, monkeypatch):
    """The optimizer's groups are built on its line without rates of their own; the
    rates are CyclicLR's, a list per group."""
    namespace, sites = _recorded(tmp_path, monkeypatch, CYCLIC_GROUPS)
    lower = _placed(sites, namespace["OPTIMIZER"], tmp_path)["lower_learning_rate"]
    assert _added(lower.patch) == [
        "sched = torch.optim.lr_scheduler.CyclicLR("
        "opt, base_lr=[0.001, 0.002], max_lr=[0.01, 0.02])"
    ]
    patched = _run_patched(tmp_path, lower.patch)["sched"]
    assert (patched.base_lrs, patched.max_lrs) == (
        pytest.approx([0.001, 0.002]),
        pytest.approx([0.01, 0.02]),
    )


def test_a_multiplying_chain_scales_the_optimizer_lr_and_a_cosine_floor(tmp_path, monkeypatch):
    """A warm-up chained to a cosine multiplies the optimizer's `lr`: that is scaled,
    with the cosine's absolute `eta_min`; a floor of 0 is left as written."""
    namespace, sites = _recorded(tmp_path, monkeypatch, WARM_UP_THEN_COSINE)
    optimizer = namespace["OPTIMIZER"]
    assert [s.kind for s in sites.schedulers(optimizer)] == [
        "LinearLR",
        "CosineAnnealingLR",
        "CosineAnnealingWarmRestarts",
    ]
    lower = _placed(sites, optimizer, tmp_path)["lower_learning_rate"]
    assert _added(lower.patch) == [
        "opt = torch.optim.SGD(model.parameters(), lr=PEAK * 0.1)",
        "    [LinearLR(opt, start_factor=0.1, total_iters=2),"
        " CosineAnnealingLR(opt, 5, FLOOR * 0.1)],",
    ]
    assert lower.title == "Lower the learning rate 10x, from 0.5 to 0.05"
    patched = _run_patched(tmp_path, lower.patch)["OPTIMIZER"]
    assert patched.param_groups[0]["initial_lr"] == pytest.approx(0.05)


def test_a_subclass_of_one_cycle_gets_no_rate_patch(tmp_path, monkeypatch):
    """Its arguments may not be OneCycleLR's, and the optimizer's `lr` is overwritten."""
    namespace, sites = _recorded(tmp_path, monkeypatch, ONE_CYCLE_SUBCLASS)
    (scheduler,) = sites.schedulers(namespace["OPTIMIZER"])
    assert (scheduler.class_name, scheduler.kind, scheduler.source.line) == (
        "Warm",
        "OneCycleLR",
        11,
    )
    assert _placed(sites, namespace["OPTIMIZER"], tmp_path)["lower_learning_rate"].patch is None


def test_the_sites_keep_nothing_alive_and_uninstall_cleanly(tmp_path, monkeypatch):
    schedulers = torch.optim.lr_scheduler
    constructors = (torch.optim.Optimizer, schedulers.LRScheduler, schedulers.ReduceLROnPlateau)
    originals = [cls.__init__ for cls in constructors]
    namespace, sites = _recorded(tmp_path, monkeypatch, ONE_CYCLE_POSITIONAL)
    assert [cls.__init__ for cls in constructors] == originals
    optimizer = namespace.pop("OPTIMIZER")
    assert sites.construction(optimizer).source.line == 4
    assert sites.step_line(optimizer).code == "opt.step()"
    assert [s.source.line for s in sites.schedulers(optimizer)] == [5]
    namespace.clear()
    del optimizer
    import gc

    gc.collect()
    assert len(sites._built) == len(sites._stepped) == len(sites._schedulers) == 0
    after = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    torch.optim.lr_scheduler.StepLR(after, 1)
    assert sites.construction(after) is None and sites.schedulers(after) == ()


def _fix_with(family: str, setting: tuple) -> Fix:
    return Fix(family, "", "", patch="--- a/train.py\n", trial_setting=setting)


def test_a_watch_trial_uses_the_rate_the_patch_writes_a_stronger_rung_too():
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    evidence = Evidence(3, None, None, history=HISTORY)
    for scale in (0.1, 0.01):
        fix = _fix_with("lower_learning_rate", ("learning_rate_scale", scale))
        plan = plan_for("lower_learning_rate", fix, evidence, [optimizer])
        with plan.apply():
            assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * scale)
        assert optimizer.param_groups[0]["lr"] == 0.5


def test_a_watch_trial_clips_at_the_bound_the_patch_writes(clipped):
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    fix = _fix_with("gradient_clipping", ("clip_grad_norm", 0.0625))
    plan = plan_for("gradient_clipping", fix, Evidence(3, None, None, history=HISTORY), [optimizer])
    model(torch.full((2, 3), 10.0)).sum().backward()
    with plan.apply():
        optimizer.step()
    assert clipped == [(_parameter_ids(optimizer), 0.0625)]
    optimizer.step()  # the plan is closed: no clip
    assert len(clipped) == 1


PLATEAU_WITH_A_FLOOR = """
import torch

model = torch.nn.Linear(3, 1)
opt = torch.optim.Adam(model.parameters(), lr=0.02)
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0, min_lr=0.01)
for _ in range(3):
    loss = model(torch.ones(2, 3)).sum() ** 2
    loss.backward()
    opt.step()
    plateau.step(1.0)  # no improvement: a plateau at every step
OPTIMIZER = opt
"""


def test_a_plateau_floor_is_scaled_with_the_rate_or_it_would_lift_it_back(tmp_path, monkeypatch):
    """ReduceLROnPlateau's own constructor does not call LRScheduler's: it is noted all
    the same, and its `min_lr` is scaled with the optimizer's `lr` (a rate patched below
    the floor would never be reduced again: max(lr * factor, min_lr) is not lower)."""
    namespace, sites = _recorded(tmp_path, monkeypatch, PLATEAU_WITH_A_FLOOR)
    optimizer = namespace["OPTIMIZER"]
    assert [(s.kind, s.source.line) for s in sites.schedulers(optimizer)] == [
        ("ReduceLROnPlateau", 5)
    ]
    lower = _placed(sites, optimizer, tmp_path)["lower_learning_rate"]
    assert _added(lower.patch) == [
        "opt = torch.optim.Adam(model.parameters(), lr=0.002)",
        "plateau = torch.optim.lr_scheduler.ReduceLROnPlateau("
        "opt, factor=0.5, patience=0, min_lr=0.001)",
    ]
    patched = _run_patched(tmp_path, lower.patch)["OPTIMIZER"]
    assert patched.param_groups[0]["lr"] == pytest.approx(0.001)  # halved to its scaled floor


def test_a_step_in_another_classs_method_clips_the_optimizer_it_steps(
    tmp_path, monkeypatch, clipped
):
    """The optimizer was built over the model's `self.parameters()`; at the trainer's
    step `self` is the trainer: the clip line reads the optimizer's param groups."""
    namespace, sites = _recorded(tmp_path, monkeypatch, OTHER_CLASS_STEPS)
    clip = _placed(sites, namespace["OPTIMIZER"], tmp_path)["gradient_clipping"]
    assert _added(clip.patch) == [
        "            torch.nn.utils.clip_grad_norm_("
        '[p for group in opt.param_groups for p in group["params"]], max_norm=0.25)'
    ]
    patched = _run_patched(tmp_path, clip.patch)
    assert clipped == [(_parameter_ids(patched["OPTIMIZER"]), 0.25)] * 3
