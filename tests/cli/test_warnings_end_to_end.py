"""Early warnings through the real CLI: raised well before the NaN, never on healthy runs."""

import pytest

from tests.conftest import line_of

pytestmark = pytest.mark.slow

STORY1 = "examples/story1_gnn_softmax_overflow.py"


def test_story1_exp_headroom_warns_hundreds_of_steps_before_the_overflow(doctor_run):
    run = doctor_run(STORY1)
    overflow_step = run.problem["step"]
    (warning,) = [w for w in run.report["warnings"] if (w["origin"] or {}).get("op") == "Exp"]
    assert warning["category"] == "forward_overflow"
    assert warning["origin"]["line"] == line_of(STORY1, "w = tf.exp(scores)")
    assert overflow_step - warning["step"] >= 300
    assert warning["headroom"]["limit"] == pytest.approx(88.72, abs=0.01)
    assert overflow_step / 2 <= warning["forecast_step"] <= overflow_step * 2
    assert "gradient-doctor warning" in run.stderr
    # The warning's fix shifts along the axis the softmax sums over, as the problem's does.
    assert "tf.reduce_max(scores, axis=2, keepdims=True)" in warning["fixes"][0]["code"]


def test_story3_growing_gradients_warn_before_the_first_nan(doctor_run):
    run = doctor_run("examples/story3_exploding_gradients.py")
    (warning,) = [w for w in run.report["warnings"] if w["category"] == "exploding_gradients"]
    assert warning["step"] < run.problem["step"]
    # Named per layer, from each step's layer gradient norms kept inside the step.
    assert "The gradient norm of layer `sequential/dense" in warning["explanation"]


@pytest.mark.parametrize(
    "script",
    [
        "examples/healthy_mlp.py",
        "examples/healthy_custom_loop.py",
        "tests/scripts/attention_mask_healthy.py",
        "tests/scripts/softmax_large_logits_healthy.py",
    ],
)
def test_healthy_runs_raise_no_warning(doctor_run, script):
    run = doctor_run(script)
    assert run.report["status"] == "healthy", run.stderr[-3000:]
    assert run.report["warnings"] == []
