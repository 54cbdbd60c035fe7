"""The bundled story examples, diagnosed through the real CLI and its JSON report."""

import re

import pytest

from tests.conftest import line_of

pytestmark = pytest.mark.slow

STORY1 = "examples/story1_gnn_softmax_overflow.py"


def test_story1_softmax_overflow_is_named_at_the_hand_written_exp(doctor_run):
    run = doctor_run(STORY1)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert problem["category"] == "forward_overflow"
    assert problem["phase"] == "forward"
    origin = problem["origin"]
    assert origin["op"] == "Exp"
    assert origin["file"] == STORY1
    assert origin["line"] == line_of(STORY1, "w = tf.exp(scores)")
    assert origin["layer"].endswith("message_passing")
    assert origin["inputs"][0]["max"] > 88.72
    assert origin["outputs"][0]["inf"] > 0
    assert problem["step"] > 800
    assert run.report["steps_watched"] == problem["step"] + 1
    assert "gradient_clipping" in [n["remedy"] for n in problem["not_fixes"]]
    assert "stable_softmax" in [f["family"] for f in problem["fixes"]]
    assert "88.72" in problem["explanation"]


def test_story1_terminal_diagnosis_names_the_line_and_the_value(doctor_run):
    run = doctor_run(STORY1)
    assert "-> examples/story1_gnn_softmax_overflow.py:" in run.stderr
    assert "w = tf.exp(scores)" in run.stderr
    assert "Will not help" in run.stderr
    assert re.search(
        rf"trying \d+ remedies, each from a saved good state through step {run.problem['step']} ",
        run.stderr,
    )
    assert "and 200 steps beyond (--trial-steps N to change, 0 to skip)" in run.stderr


STORY2 = "examples/story2_wgan_gp_norm.py"
STORY3 = "examples/story3_exploding_gradients.py"


def test_story2_norm_at_zero_is_a_backward_singularity_at_the_norm_line(doctor_run):
    run = doctor_run(STORY2)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert problem["category"] == "backward_singularity"
    assert problem["phase"] == "backward"
    origin = problem["origin"]
    assert origin["op"] == "SqrtGrad"
    assert origin["gradient_of"] == "Sqrt"
    assert origin["file"] == STORY2
    assert origin["line"] == line_of(STORY2, "norm = tf.norm(grads, axis=-1)")
    assert origin["inputs"][0]["zeros"] > 0  # the norm that was exactly zero
    assert "safe_norm" in [f["family"] for f in problem["fixes"]]
    assert "gradient_clipping" in [n["remedy"] for n in problem["not_fixes"]]


def test_story3_growing_gradients_are_exploding_gradients(doctor_run):
    run = doctor_run(STORY3)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert problem["category"] == "exploding_gradients"
    assert problem["origin"]["file"] == STORY3
    assert problem["origin"]["line"] == line_of(STORY3, "loss = loss_fn(y, pred)")
    assert problem["phase"] == "forward"
    families = [f["family"] for f in problem["fixes"]]
    assert families[:2] == ["lower_learning_rate", "gradient_clipping"]
    assert "grew from" in problem["explanation"]


@pytest.mark.parametrize("script", ["examples/healthy_mlp.py", "examples/healthy_custom_loop.py"])
def test_healthy_examples_are_healthy(doctor_run, script):
    run = doctor_run(script)
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy"
    assert run.report["problems"] == []
    assert run.report["steps_watched"] > 100


def test_story1_max_shift_uses_the_softmax_axis_of_the_users_code(doctor_run):
    # The scores are (batch, nodes, neighbours, 1) and the softmax sums over axis 2: a
    # max over the last axis would subtract each score from itself and flatten the softmax.
    stable = next(f for f in doctor_run(STORY1).problem["fixes"] if f["family"] == "stable_softmax")
    assert "tf.reduce_max(scores, axis=2, keepdims=True)" in stable["code"]


def _fix(problem, family):
    return next(f for f in problem["fixes"] if f["family"] == family)


def _not_fix(problem, remedy):
    return next(n for n in problem["not_fixes"] if n["remedy"] == remedy)


def test_story1_max_shift_is_verified_and_clipping_still_overflows_in_the_trial(doctor_run):
    problem = doctor_run(STORY1).problem
    shift = _fix(problem, "stable_softmax")
    assert shift["verified"] is True, shift["evidence"]
    assert f"before step {problem['step']}" in shift["evidence"]
    assert "all 200 steps finite" in shift["evidence"]
    assert "then 199 batches of the training data" in shift["evidence"]  # fit's data, read anew
    assert "failed again at trial step" in shift["evidence"]  # the unchanged step did not hold
    # Clipping and a lower rate act on the updates: tried from before the trouble (the
    # weights' drift), they still end in the same overflow.
    clipping = _not_fix(problem, "gradient_clipping")
    assert "global_clipnorm=" in clipping["evidence"]
    assert "this remedy acts on the updates" in clipping["evidence"]
    assert "not finite again at trial step" in clipping["evidence"]
    # A lower rate slows the drift: it is either refuted by its trial, or, where it held
    # through the window, said to be a delay rather than a cure.
    lower = [f for f in problem["fixes"] if f["family"] == "lower_learning_rate"]
    if lower:
        assert "it may only delay the failure past this window" in lower[0]["evidence"]
        assert problem["fixes"].index(lower[0]) > problem["fixes"].index(shift)
    else:
        assert "not finite again" in _not_fix(problem, "lower_learning_rate")["evidence"]


def test_story2_safe_norm_is_verified_from_the_last_good_state(doctor_run):
    problem = doctor_run(STORY2).problem
    norm = _fix(problem, "safe_norm")
    assert norm["verified"] is True, norm["evidence"]
    assert "all 200 steps finite" in norm["evidence"]
    # The trial starts from the random state the failing step had: it fails at once again.
    assert "failed again at trial step 1)" in norm["evidence"]
    clipping = _not_fix(problem, "gradient_clipping")["evidence"]
    assert "this remedy acts on the updates" in clipping
    assert "not finite again at trial step" in clipping
