"""The whole pipeline through a toy NumPy adapter (no TensorFlow): caught, localized from its op
events, diagnosed by the real knowledge base, tried, and reported; a healthy run stays healthy."""

import functools
import json

import numpy as np
import pytest

from gradient_doctor.errors import TrainingStopped
from gradient_doctor.render.json_report import report_to_dict, write_json_report
from tests.conftest import line_of
from tests.core import toy_adapter as toy
from tests.core.toy_net import TwoLayerNet, train_step

NET = "tests/core/toy_net.py"
# A learning rate at which the logits pass ~17 after a few dozen steps, and one that trains.
DIVERGING, HEALTHY = 2.0, 0.1


def _batches(steps: int, flip_at: int | None = None):
    """Batches of 16 of a linearly separable problem, in a fixed order."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (64, 4)).astype(np.float32)
    y = (x[:, :1] + x[:, 1:2] > 0).astype(np.float32)
    for step in range(steps):
        rows = slice(16 * (step % 4), 16 * (step % 4 + 1))
        yield x[rows], (1 - y[rows] if step == flip_at else y[rows])


def _run(learning_rate: float, steps: int = 100, watched: bool = True, flip_at=None, **options):
    """Train the toy net; returns its session (None unwatched), the net and any stop."""
    net, optimizer = TwoLayerNet(seed=0), toy.SGD(learning_rate)
    step = functools.partial(train_step, net, optimizer)
    adapter = toy.ToyAdapter(optimizer, net.variables, **options) if watched else None
    stopped = None
    if adapter is not None:
        adapter.install()
        step = adapter.watch(step)
    try:
        for x, y in _batches(steps, flip_at):
            step(x, y)
    except TrainingStopped as error:
        stopped = error.finding
    finally:
        if adapter is not None:
            adapter.uninstall()
    return (adapter.session if adapter else None), net, stopped


def test_a_log_of_zero_is_caught_localized_at_its_line_diagnosed_and_reported(tmp_path):
    session, net, stopped = _run(DIVERGING, trial_steps=0)
    report = session.report("toy_net.py")
    assert report.status == "problem"
    (problem,) = report.problems
    assert stopped is problem
    assert problem.step > 10 and report.steps_watched == problem.step + 1
    assert (problem.category, problem.phase) == ("forward_domain", "forward")
    origin = problem.origin
    assert origin.op == "Log"
    assert (origin.source.file, origin.source.line) == (NET, line_of(NET, "log_q = toy.log(q)"))
    assert origin.inputs[0].zeros > 0 and origin.outputs[0].inf > 0
    assert "Log" in problem.explanation and problem.skipped_updates == 1
    (safe_log,) = [fix for fix in problem.fixes if fix.family == "safe_log"]
    assert safe_log.patch.startswith(f"--- a/{NET}\n+++ b/{NET}\n")
    # The failing update was skipped: the weights are those after the steps before it.
    _, before, _ = _run(DIVERGING, steps=problem.step, watched=False)
    for variable, expected in zip(net.variables, before.variables):
        np.testing.assert_array_equal(variable.value, expected.value)
    write_json_report(report, tmp_path / "report.json")
    written = json.loads((tmp_path / "report.json").read_text())
    assert written == json.loads(json.dumps(report_to_dict(report)))
    (origin_json,) = [p["origin"] for p in written["problems"]]
    assert (origin_json["op"], origin_json["file"]) == ("Log", NET)
    assert origin_json["line"] == origin.source.line


def test_the_toy_adapter_tries_the_remedies_it_can_and_the_core_judges_them():
    session, net, _ = _run(DIVERGING, trial_steps=5)
    (problem,) = session.problems
    (lower,) = [n for n in problem.not_fixes if n.remedy == "lower_learning_rate"]
    assert lower.evidence.startswith("tried with learning_rate / 10")
    assert "not finite again at trial step 1 of 5" in lower.evidence
    # The trials put the run's state back: the weights are as without them.
    _, untried, _ = _run(DIVERGING, trial_steps=0)
    for variable, expected in zip(net.variables, untried.variables):
        np.testing.assert_array_equal(variable.value, expected.value)


def test_a_healthy_toy_run_stays_healthy_and_computes_what_it_computes_unwatched():
    session, net, stopped = _run(HEALTHY)
    report = session.report()
    assert stopped is None and report.status == "healthy"
    assert (report.problems, report.warnings, report.steps_watched) == ((), (), 100)
    assert {series.name for series in report.series} == {"loss", "grad_norm/global"}
    _, plain, _ = _run(HEALTHY, watched=False)
    for variable, expected in zip(net.variables, plain.variables):
        np.testing.assert_array_equal(variable.value, expected.value)


def test_an_early_warning_names_the_toy_optimizers_learning_rate():
    session, _, _ = _run(HEALTHY, steps=60, flip_at=40)
    (spike,) = session.report().warnings
    assert (spike.category, spike.step) == ("loss_spike", 40)
    titles = [fix.title for fix in spike.fixes]
    assert "Lower the learning rate 10x, from 0.1 to 0.01" in titles


def test_training_started_again_after_a_stop_is_not_diagnosed_again():
    # A script that calls `fit` in a loop: each call trains on after the doctor stopped
    # the previous one. Its failing steps stay skipped and make no new problem.
    net, optimizer = TwoLayerNet(seed=0), toy.SGD(DIVERGING)
    adapter = toy.ToyAdapter(optimizer, net.variables, trial_steps=0)
    adapter.install()
    step = adapter.watch(functools.partial(train_step, net, optimizer))
    stops = []
    try:
        with pytest.warns(UserWarning, match="not diagnosed again") as said:
            for _ in range(3):  # three `fit` calls
                try:
                    for x, y in _batches(100):
                        step(x, y)
                except TrainingStopped as error:
                    stops.append(error.finding)
    finally:
        adapter.uninstall()
    (problem,) = adapter.session.report("toy_net.py").problems
    assert stops == [problem] * 3
    assert len([w for w in said if "not diagnosed again" in str(w.message)]) == 1
