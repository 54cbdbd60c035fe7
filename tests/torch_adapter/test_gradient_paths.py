"""Broken gradient paths in PyTorch: the parameters an optimizer holds whose `.grad` stays
None (all or some), the op and the user's line where their path to the loss breaks, the
remedies spelled in PyTorch; runs where every gradient flows report nothing."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import gradient_doctor.torch as doctor_torch  # noqa: E402
from gradient_doctor.render.json_report import report_to_dict  # noqa: E402
from gradient_doctor.torch_adapter.localize.gradient_paths import (  # noqa: E402
    CutWatch,
    PathRecorder,
    find_path_breaks,
)
from gradient_doctor.torch_adapter.localize.module_scope import ModuleScope  # noqa: E402
from tests.conftest import line_of  # noqa: E402
from tests.scripts.torch import (  # noqa: E402
    healthy_frozen_parts,
    item_round_trip,
    numpy_round_trip_encoder,
    partial_cuts,
)
from tests.scripts.torch import mlp_log_of_sigmoid as healthy_mlp  # noqa: E402
from tests.scripts.torch import text_gan_argmax as gan  # noqa: E402
from tests.scripts.torch import three_cuts_in_one_step as three_cuts  # noqa: E402
from tests.torch_adapter.conftest import run_until_stopped, same_state  # noqa: E402

SCRIPTS = "tests/scripts/torch"


def _problems(step) -> list[dict]:
    """The run's problems as the JSON report has them."""
    return json.loads(json.dumps(report_to_dict(step.report())))["problems"]


def _watched(build, **kwargs):
    models, optimizers, step = build(**kwargs)
    return doctor_torch.watch(step, model=models, optimizer=optimizers, verbose=False)


def _break(problem: dict) -> tuple:
    point = problem["disconnected"]["break"]
    return None if point is None else (point["op"], point["file"], point["line"])


def test_argmax_tokens_fed_to_a_discriminator_cut_the_whole_generator():
    models, (opt_g, opt_d), step = gan.build()
    watched = doctor_torch.watch(step, model=list(models), optimizer=[opt_g, opt_d], verbose=False)
    finding, calls = run_until_stopped(watched, gan.batches(4))
    assert finding is not None and calls == 1  # nothing of the generator can ever train
    (problem,) = _problems(watched)  # the discriminator's optimizer is not flagged
    assert problem["category"] == "disconnected_gradients"
    assert problem["disconnected"]["variables"] == [
        "Generator.hidden.weight",
        "Generator.hidden.bias",
        "Generator.to_logits.weight",
        "Generator.to_logits.bias",
    ]
    assert problem["disconnected"]["all"] is True
    script = f"{SCRIPTS}/text_gan_argmax.py"
    assert _break(problem) == (
        "ArgMax",
        script,
        line_of(script, "tokens = logits.argmax(dim=-1)"),
    )
    fixes = {fix["family"]: fix["code"] for fix in problem["fixes"]}
    assert {"soft_embedding", "gumbel_softmax", "reinforce", "straight_through"} <= set(fixes)
    assert "F.gumbel_softmax(logits, tau=0.5, hard=True, dim=-1)" in fixes["gumbel_softmax"]
    assert "y_soft + (y_hard - y_soft).detach()" in fixes["straight_through"]
    assert "torch.distributions.Categorical(logits=logits)" in fixes["reinforce"]
    assert "tf." not in "".join(fixes.values())
    assert "PyTorch raises nothing" in problem["explanation"]
    assert "Keras" not in problem["explanation"]
    assert {n["remedy"] for n in problem["not_fixes"]} >= {"requires_grad", "retain_graph"}


@pytest.mark.parametrize(
    ("kind", "variables", "op", "code"),
    [
        ("detach", ["stem.weight", "stem.bias"], "StopGradient", "h = h.detach()"),
        (
            "no_grad",
            ["encoder.0.weight", "encoder.0.bias"],
            "MatMul",
            "features = model.encoder(x)",
        ),
        ("unused_head", ["aux_head.weight", "aux_head.bias"], None, None),
    ],
)
def test_a_partial_cut_is_reported_once_and_training_goes_on_unchanged(kind, variables, op, code):
    watched = _watched(partial_cuts.build, kind=kind)
    finding, calls = run_until_stopped(watched, partial_cuts.batches(6))
    assert (finding, calls, watched.session.steps_watched) == (None, 6, 6)
    (problem,) = _problems(watched)  # seen on every step, reported once
    assert problem["category"] == "disconnected_gradients"
    assert problem["disconnected"]["variables"] == variables
    assert problem["disconnected"]["all"] is False
    script = f"{SCRIPTS}/partial_cuts.py"
    expected = None if op is None else (op, script, line_of(script, code))
    assert _break(problem) == expected
    assert "silently never train" in problem["explanation"]
    if kind == "unused_head":
        assert "never reads" in problem["explanation"]
        assert "exclude_unused_variables" in {f["family"] for f in problem["fixes"]}
    if kind == "no_grad":
        assert "gradients off" in problem["explanation"]

    # The replay that found the break changed nothing the run computes.
    model, optimizer, plain = partial_cuts.build(kind)
    for batch in partial_cuts.batches(6):
        plain(*batch)
    assert same_state(watched.adapter.models[0], watched.adapter.optimizers[0], model, optimizer)


def test_an_item_round_trip_rewrapped_by_torch_tensor_leaves_at_the_item_line():
    watched = _watched(item_round_trip.build)
    finding, calls = run_until_stopped(watched, item_round_trip.batches(3))
    assert finding is not None and calls == 1
    (problem,) = _problems(watched)
    assert problem["disconnected"]["variables"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert problem["disconnected"]["all"] is True
    script = f"{SCRIPTS}/item_round_trip.py"
    item_line = line_of(script, "errors = [(p - t).abs().item() for p, t in zip(pred, y)]")
    assert _break(problem) == ("Item", script, item_line)
    back = line_of(script, "loss = torch.tensor(errors, requires_grad=True).mean()")
    assert f"came back as a new tensor on your line {script}:{back}" in problem["explanation"]
    assert [f["family"] for f in problem["fixes"]] == ["stay_in_framework"]


def test_a_numpy_round_trip_through_from_numpy_is_rewritten_in_torch():
    watched = _watched(numpy_round_trip_encoder.build)
    # A partial cut, reported once it held for `NEW_CUT_UPDATES` updates: training goes on.
    run_until_stopped(watched, numpy_round_trip_encoder.batches(3))
    (problem,) = _problems(watched)
    assert problem["disconnected"]["variables"] == ["encoder.0.weight", "encoder.0.bias"]
    script = f"{SCRIPTS}/numpy_round_trip_encoder.py"
    code = "h = torch.from_numpy(self.encoder(x).detach().numpy())"
    assert problem["disconnected"]["break"]["line"] == line_of(script, code)
    explanation = problem["explanation"]
    assert "left PyTorch for NumPy (`.numpy()`)" in explanation
    assert "`torch.from_numpy(...)` has no autograd history" in explanation
    assert explanation.count(code) == 1  # it left and came back on the same line
    (fix,) = problem["fixes"]
    assert fix["family"] == "stay_in_framework"
    assert fix["code"].splitlines()[:2] == [
        f"# {script}:{line_of(script, code)} was: {code}",
        "h = self.encoder(x)",
    ]
    assert not any(word in json.dumps(problem) for word in ("tf.", "TensorFlow", "Keras"))
    assert "torch.tensor" not in explanation + fix["code"]  # the line calls torch.from_numpy


@pytest.mark.parametrize(
    ("build", "batches"),
    [
        (healthy_frozen_parts.build, healthy_frozen_parts.batches),
        (lambda: healthy_mlp.build(seed=1, learning_rate=0.02), healthy_mlp.batches),
    ],
)
def test_runs_where_every_gradient_flows_report_nothing(build, batches):
    watched = _watched(build)
    finding, calls = run_until_stopped(watched, batches(12))
    assert (finding, calls) == (None, 12)
    assert watched.report().status == "healthy"
    assert _problems(watched) == []


def _record(step, parameters):
    """Run `step` under a `PathRecorder` as `gradient-doctor run` would: the breaks of
    the parameters left without a gradient, for the loss it returns."""
    names = {id(p): f"p{i}" for i, p in enumerate(parameters)}
    recorder = PathRecorder(ModuleScope({}), names)
    with recorder.exits_noted(), recorder:
        loss = step()
    cut = [p for p in parameters if p.grad is None]
    return find_path_breaks(recorder, cut, [loss])


def test_topk_indices_an_integer_cast_and_a_tolist_round_trip_each_break_at_their_line():
    parameters, step = three_cuts.build()
    breaks = {b.variables: b for b in _record(step, parameters)}
    script = f"{SCRIPTS}/three_cuts_in_one_step.py"
    assert {names: (b.node.op_type, b.node.source.line) for names, b in breaks.items()} == {
        ("p0",): ("TopKV2", line_of(script, "_, picked = (x @ w).topk(2, dim=1)")),
        ("p1",): ("Cast", line_of(script, "steps = (x @ v).long()")),
        ("p2",): ("ToList", line_of(script, "rows = (x @ u).tolist()")),
    }
    assert breaks[("p2",)].reentry.line == line_of(script, "back = torch.tensor(rows)")
    assert {b.framework for b in breaks.values()} == {"torch"}


def test_a_part_without_gradients_is_noted_once_it_stays_so_and_a_skipped_expert_is_not():
    from gradient_doctor.torch_adapter.localize.gradient_paths import (
        NEW_CUT_UPDATES,
        PERSISTENT_UPDATES,
    )

    used, unused = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD([*used.parameters(), *unused.parameters()], lr=0.1)
    watch = CutWatch()
    used(torch.ones(1, 2)).sum().backward()
    for _ in range(NEW_CUT_UPDATES - 1):
        watch.observe(optimizer, 2)
    assert watch.take() == []
    watch.observe(optimizer, 2)  # never a gradient, NEW_CUT_UPDATES updates in a row
    ((seen, cut, updates),) = watch.take()
    assert seen is optimizer and [id(p) for p in cut] == [id(p) for p in unused.parameters()]
    assert updates == NEW_CUT_UPDATES  # the problem is dated that many updates back
    watch.observe(optimizer, 2)
    assert watch.take() == []  # noted once
    # Two experts, one chosen per step (the same count of gradients each time): each
    # trains every other step, and neither is noted.
    experts = [torch.nn.Linear(2, 2) for _ in range(2)]
    routed = torch.optim.SGD([p for e in experts for p in e.parameters()], lr=0.1)

    def step(chosen: int) -> None:
        routed.zero_grad(set_to_none=True)
        experts[chosen](torch.ones(1, 2)).sum().backward()
        watch.observe(routed, 2)

    for number in range(3 * PERSISTENT_UPDATES):
        step(number % 2)
    assert watch.take() == []
    # The router stops choosing expert 1: it trained before, so it is noted only after
    # PERSISTENT_UPDATES updates in a row without a gradient.
    for _ in range(PERSISTENT_UPDATES - 1):
        step(0)
    assert watch.take() == []
    step(0)
    ((_, cut, _),) = watch.take()
    assert [id(p) for p in cut] == [id(p) for p in experts[1].parameters()]
