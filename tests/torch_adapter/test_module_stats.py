"""Per-module statistics of watched torch steps: each field against a direct computation on a
real tiny net with known dead ReLU units and saturated tanh units, module or functional."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import gradient_doctor.torch as doctor_torch  # noqa: E402
from gradient_doctor.core.records import LAYER_STATS_EVERY  # noqa: E402

DEAD_UNITS = 5  # of the 8 units of `body.hidden`, pushed far below 0 by their bias


class Body(nn.Module):
    """A hidden layer with a functional ReLU, then a tanh layer fed a large input."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(4, 8)
        self.squash = nn.Linear(8, 6)

    def forward(self, x):
        return torch.tanh(self.squash(F.relu(self.hidden(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Body()
        self.head = nn.Sequential(nn.Linear(6, 3), nn.ReLU(), nn.Linear(3, 1))

    def forward(self, x):
        return self.head(self.body(x))


def _net():
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():
        net.body.hidden.bias[:DEAD_UNITS] = -100.0
        net.body.hidden.bias[DEAD_UNITS:] = 5.0  # the others always on
        net.body.squash.weight.mul_(40.0)  # most tanh units pinned at +-1
    return net


def _batches(count):
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(16, 4, generator=generator), torch.randn(16, 1, generator=generator))
        for _ in range(count)
    ]


def _step(net, optimizer):
    def step(x, y):
        optimizer.zero_grad()
        loss = F.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def _expected(net, x, y):
    """Every statistic computed directly, from a copy of the net before the step."""
    hidden = net.body.hidden(x)
    relu = F.relu(hidden)
    squash = net.body.squash(relu)
    tanh = torch.tanh(squash)
    loss = F.mse_loss(net.head(tanh), y)
    loss.backward()
    modules = {
        "body.hidden": net.body.hidden,
        "body.squash": net.body.squash,
        "head.0": net.head[0],
        "head.2": net.head[2],
    }

    def norm(tensors):
        return math.sqrt(sum(float(t.detach().double().square().sum()) for t in tensors))

    return {
        "grad": {n: norm([p.grad for p in m.parameters()]) for n, m in modules.items()},
        "weight": {n: norm(list(m.parameters())) for n, m in modules.items()},
        "dead": float((relu == 0).all(dim=0).float().mean()),
        "saturated": float((tanh.abs() > 0.99).all(dim=0).float().mean()),
        "max_abs": {
            "body.hidden": float(hidden.abs().max()),
            "body.squash": float(squash.abs().max()),
        },
    }


def test_module_statistics_match_a_direct_computation():
    net = _net()
    reference = _net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    step = doctor_torch.watch(_step(net, optimizer), model=net, optimizer=optimizer, verbose=False)
    batches = _batches(LAYER_STATS_EVERY + 1)
    x0, y0 = batches[0]
    expected = _expected(reference, x0, y0)
    seen = []
    original = step.adapter.step_records

    def keep(index, reading):
        made = original(index, reading)
        seen.append(made)
        return made

    step.adapter.step_records = keep
    for batch in batches:
        step(*batch)
    assert len(seen) == LAYER_STATS_EVERY + 1
    # Step 0 is sampled: its per-module gradient norms, then its other statistics.
    ring, full = seen[0]
    assert ring.step == full.step == 0
    grads = ring.layer_values("grad_norm")
    assert list(grads) == list(expected["grad"])
    for name, value in expected["grad"].items():
        assert grads[name] == pytest.approx(value, rel=1e-5)
    assert full.layer_values("grad_norm") == {}
    weights = full.layer_values("weight_norm")
    for name, value in expected["weight"].items():
        assert weights[name] == pytest.approx(value, rel=1e-5)
    dead = full.layer_values("dead_fraction")
    assert dead["body.hidden"] == pytest.approx(expected["dead"]) == DEAD_UNITS / 8
    assert "body.squash" not in dead  # its output feeds a tanh, not a ReLU
    assert set(dead) == {"body.hidden", "head.0"}  # the module ReLU goes with its Linear
    saturated = full.layer_values("saturated_fraction")
    assert saturated == {"body.squash": pytest.approx(expected["saturated"])}
    assert expected["saturated"] >= 0.5
    largest = full.layer_values("activation_max_abs")
    for name, value in expected["max_abs"].items():
        assert largest[name] == pytest.approx(value, rel=1e-5)
    # The update ratio: the norm of the change SGD made over the weight norm before it.
    ratios = full.layer_values("update_ratio")
    # SGD without momentum changes the weights by lr * grad.
    change = 0.01 * expected["grad"]["body.hidden"]
    assert ratios["body.hidden"] == pytest.approx(
        change / expected["weight"]["body.hidden"], rel=1e-4
    )
    # The steps between samples carry the loss alone; the next sample reads every
    # step's gradient norms since the last one, oldest first.
    assert all(len(made) == 1 and not made[0].layers for made in seen[1:LAYER_STATS_EVERY])
    *history, last = seen[LAYER_STATS_EVERY]
    assert [record.step for record in history] == list(range(1, LAYER_STATS_EVERY + 1))
    assert all(set(r.layer_values("grad_norm")) == set(expected["grad"]) for r in history)
    assert (
        last.step == LAYER_STATS_EVERY
        and last.layer_values("dead_fraction")["body.hidden"] == 5 / 8
    )
    assert step.adapter.layer_records() == last.layers


def test_only_sampled_steps_run_under_the_forward_hooks():
    net = _net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    step = doctor_torch.watch(_step(net, optimizer), model=net, optimizer=optimizer, verbose=False)
    hooked = []
    original = net.body.forward

    def spy(x):
        hooked.append(step.adapter.stats.hooked)
        return original(x)

    net.body.forward = spy
    for batch in _batches(2 * LAYER_STATS_EVERY + 1):
        step(*batch)
    assert [i for i, on in enumerate(hooked) if on] == [0, LAYER_STATS_EVERY, 2 * LAYER_STATS_EVERY]


def _stuck_by_mask(stuck: torch.Tensor, axis: int) -> float:
    """The fraction of units along `axis` whose every entry is stuck, from a full mask."""
    units = stuck.movedim(axis, 0).reshape(stuck.shape[axis], -1)
    return float(units.all(dim=1).float().mean())


@pytest.mark.parametrize("axis", [1, -1])
def test_stuck_fractions_agree_with_a_full_mask_on_any_layout(axis):
    from gradient_doctor.torch_adapter.step.module_stats import _stuck_fraction

    generator = torch.Generator().manual_seed(3)
    raw = torch.randn(4, 6, 5, 4, generator=generator)
    units = raw.shape[axis]
    offsets = torch.zeros(units)
    offsets[: units // 2] = -50.0  # half the units far below 0 on every entry
    shape = [1] * raw.dim()
    shape[axis] = units
    pre = raw + offsets.reshape(shape)
    relu = F.relu(pre)
    fraction, field_name = _stuck_fraction("relu", relu, axis)
    assert field_name == "dead_fraction"
    assert float(fraction) == _stuck_by_mask(relu == 0, axis) == (units // 2) / units
    # A tanh unit pinned at +1 on some entries and -1 on others is saturated on all.
    stuck_units = offsets.reshape(shape) < 0
    pinned = torch.where(raw > 0, 40.0, -40.0)
    tanh = torch.tanh(torch.where(stuck_units, pinned, raw * 0.1))
    fraction, field_name = _stuck_fraction("tanh", tanh, axis)
    assert field_name == "saturated_fraction"
    assert float(fraction) == _stuck_by_mask(tanh.abs() > 0.99, axis) == (units // 2) / units
    sigmoid = torch.sigmoid(torch.where(stuck_units, pinned, raw * 0.1))
    fraction, _ = _stuck_fraction("sigmoid", sigmoid, axis)
    flat = (sigmoid < 0.01) | (sigmoid > 0.99)
    assert float(fraction) == _stuck_by_mask(flat, axis) == (units // 2) / units


class Attention(nn.Module):
    """A softmax written by hand (the user's exp), beside an exp a library makes."""

    def __init__(self):
        super().__init__()
        self.score = nn.Linear(4, 5)

    def forward(self, x):
        scores = self.score(x) * 3.0
        weights = torch.exp(scores)
        weights = weights / weights.sum(dim=1, keepdim=True)
        spread = torch.distributions.transforms.ExpTransform()(scores)  # torch's own exp
        return weights + 0.0 * spread


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attend = Attention()
        self.out = nn.Linear(5, 1)

    def forward(self, x):
        return self.out(self.attend(x))


def test_a_sampled_forward_measures_the_users_risky_ops_against_their_limits():
    torch.manual_seed(0)
    net = Scorer()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    step = doctor_torch.watch(_step(net, optimizer), model=net, optimizer=optimizer, verbose=False)
    seen = []
    original = step.adapter.step_records

    def keep(index, reading):
        made = original(index, reading)
        seen.append(made[-1])
        return made

    step.adapter.step_records = keep
    batches = _batches(LAYER_STATS_EVERY + 1)
    with torch.no_grad():
        expected = [float((net.attend.score(x) * 3.0).max()) for x, _ in batches[:1]]
    for batch in batches:
        step(*batch)
    # Sampled steps 0 and LAYER_STATS_EVERY carry the headroom; the others none.
    assert [bool(record.headroom) for record in seen] == [True] + [False] * (
        LAYER_STATS_EVERY - 1
    ) + [True]
    (sample,) = seen[0].headroom  # the user's exp only: torch's ExpTransform is its own
    line = _line_of("weights = torch.exp(scores)")
    assert (sample.op, sample.layer, sample.line, sample.kind) == (
        "Exp",
        "attend",
        line,
        "max_input",
    )
    assert sample.code == "weights = torch.exp(scores)"
    assert sample.value == pytest.approx(expected[0], rel=1e-6)
    assert sample.limit == pytest.approx(88.72, abs=0.01) and sample.dtype == "float32"
    assert sample.reduction_axis == 1  # the sum that normalises it, for the max-shift fix


def _line_of(text: str) -> int:
    with open(__file__) as handle:
        return next(n for n, line in enumerate(handle, 1) if line.strip() == text)


def test_the_loss_written_after_the_forward_is_measured_too_without_layer_units():
    # A Poisson loss's exp in the step function, outside any module, is the user's risky
    # op (no layer); a hinge's relu there is no layer's unit, so no dead-unit fraction.
    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)

    def step(x, y):
        optimizer.zero_grad()
        log_rate = net(x)
        poisson = (torch.exp(log_rate * 2.0) - y.abs() * log_rate).mean()
        hinge = F.relu(1.0 - y * log_rate).mean()
        (poisson + hinge).backward()
        optimizer.step()
        return poisson.detach()

    watched = doctor_torch.watch(step, model=net, optimizer=optimizer, verbose=False)
    seen = []
    original = watched.adapter.step_records
    watched.adapter.step_records = lambda i, r: seen.append(original(i, r)) or seen[-1]
    (x, y), *_ = batches = _batches(2)
    with torch.no_grad():
        expected = float((net(x) * 2.0).max())
    for batch in batches:
        watched(*batch)
    record = seen[0][-1]
    (sample,) = record.headroom
    line = _line_of("poisson = (torch.exp(log_rate * 2.0) - y.abs() * log_rate).mean()")
    assert (sample.op, sample.layer, sample.line) == ("Exp", None, line)
    assert sample.key == f"Exp@{sample.file}:{line}"
    assert sample.value == pytest.approx(expected, rel=1e-6)
    assert all(layer.dead_fraction is None for layer in record.layers)
