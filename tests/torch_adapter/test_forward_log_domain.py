"""A torch MLP whose hand-written log-probability reaches log(0): caught before the update,
replayed, named (Log, module `head`, its line, forward) and diagnosed as the TF one is."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import gradient_doctor.torch as doctor_torch  # noqa: E402
from gradient_doctor.render.json_report import report_to_dict  # noqa: E402
from tests.conftest import line_of  # noqa: E402
from tests.scripts.torch import mlp_log_of_sigmoid as script  # noqa: E402
from tests.torch_adapter.conftest import (  # noqa: E402
    first_nonfinite_step,
    run_until_stopped,
    same_state,
)

SCRIPT = "tests/scripts/torch/mlp_log_of_sigmoid.py"
STEPS = 60


def test_log_of_zero_is_named_at_its_module_and_line_with_the_update_skipped():
    model, optimizer, step = script.build()
    watched = doctor_torch.watch(step, model=model, optimizer=optimizer, verbose=False)
    finding, calls = run_until_stopped(watched, script.batches(STEPS))

    unwatched, _, plain = script.build()
    expected = first_nonfinite_step(plain, script.batches(STEPS), list(unwatched.parameters()))
    assert expected is not None and expected > 0
    assert finding is not None and (finding.step, calls) == (expected, expected + 1)
    assert (finding.category, finding.phase) == ("forward_domain", "forward")
    origin = finding.origin
    assert (origin.op, origin.layer, origin.gradient_of) == ("Log", "head", None)
    assert (origin.source.file, origin.source.line) == (
        SCRIPT,
        line_of(SCRIPT, "log_q = torch.log(1 - p)"),
    )
    assert origin.inputs[0].zeros > 0 and origin.outputs[0].neg_inf > 0
    assert finding.skipped_updates == 1
    assert "from_logits" in {fix.family for fix in finding.fixes}

    # The failing update was skipped: weights and momentum are those after `expected` steps.
    plain_model, plain_optimizer, plain_step = script.build()
    for batch in list(script.batches(STEPS))[:expected]:
        plain_step(*batch)
    assert same_state(model, optimizer, plain_model, plain_optimizer)

    report = json.loads(json.dumps(report_to_dict(watched.report(SCRIPT))))
    assert (report["framework"], report["status"], report["steps_watched"]) == (
        "torch",
        "problem",
        expected + 1,
    )
    (problem,) = report["problems"]
    assert (problem["origin"]["op"], problem["origin"]["layer"]) == ("log", "head")


def test_with_stop_on_problem_off_training_goes_on_from_the_last_good_state():
    model, optimizer, step = script.build()
    watched = doctor_torch.watch(
        step, model=model, optimizer=optimizer, stop_on_problem=False, verbose=False
    )
    finding, calls = run_until_stopped(watched, script.batches(12))
    assert finding is None and calls == 12
    problems = watched.session.problems
    assert problems and problems[0].category == "forward_domain"
    assert watched.session.steps_watched == 12
