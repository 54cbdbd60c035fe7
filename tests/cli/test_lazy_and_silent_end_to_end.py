"""Lazily built models watched from their first step, skipped updates always reported,
silent failures ending `problem`, and dead ReLUs named as such, through the real CLI."""

import functools
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, line_of, run_doctor

pytestmark = pytest.mark.slow

NO_TRIALS = ("--trial-steps", "0")
TRAIN_STEP = "tests/scripts/lazy_subclass_train_step.py"
BLOCKS = "tests/scripts/lazy_blocks_compiled_loss.py"
WATCH_LOOP = "tests/scripts/lazy_watch_loop.py"


def _printed(output: str, tag: str) -> dict:
    """The JSON a script printed after `tag` on a line of its own."""
    lines = [line for line in output.splitlines() if line.startswith(tag + " ")]
    assert len(lines) == 1, output[-3000:]
    return json.loads(lines[0][len(tag) + 1 :])


@functools.cache
def _python(script: str, *args: str) -> subprocess.CompletedProcess:
    """Run `script` with plain Python (no `gradient-doctor run`), from the repository root.

    Cached: the plain run a watched one is compared with is run once per session.
    """
    return subprocess.run(
        [sys.executable, script, *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def _assert_problem(problem: dict, category: str, op: str, script: str, code: str, step: int):
    assert problem["category"] == category, problem["explanation"]
    assert problem["origin"]["op"] == op
    assert problem["origin"]["file"] == script
    assert problem["origin"]["line"] == line_of(script, code)
    assert problem["step"] == step


@pytest.fixture
def onednn_on(monkeypatch):
    """TensorFlow's default on x86 CPUs, which fuses a Dense's MatMul, bias and activation
    (the suite turns it off elsewhere): watching must not change those fused kernels."""
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")


# --- A subclassed model with no Input and its own train_step -------------------------------


def test_lazy_subclassed_train_step_run_is_watched_and_bit_identical(tmp_path, onednn_on):
    plain = _printed(_python(TRAIN_STEP).stdout, "RESULT")
    run = run_doctor(TRAIN_STEP, tmp=tmp_path, options=NO_TRIALS)
    assert _printed(run.stdout, "RESULT") == plain
    assert "no trainable variables" not in run.stderr
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy"
    assert run.report["steps_watched"] == 20  # from its first step
    assert any(s["name"].startswith("grad_norm/regressor/") for s in run.report["series"])


def test_lazy_subclassed_train_step_nan_is_diagnosed_under_run(tmp_path):
    run = run_doctor(TRAIN_STEP, "--nan", tmp=tmp_path, options=NO_TRIALS)
    assert run.exit_code == 1
    assert "no trainable variables" not in run.stderr
    _assert_problem(run.problem, "backward_singularity", "SqrtGrad", TRAIN_STEP, "tf.sqrt(", 7)
    assert run.problem["origin"]["gradient_of"] == "Sqrt"
    assert len(_printed(run.stdout, "RESULT")["losses"]) == 8  # stopped at the failing step


def test_lazy_subclassed_train_step_under_doctor_callback(onednn_on):
    plain = _printed(_python(TRAIN_STEP).stdout, "RESULT")
    healthy = _python(TRAIN_STEP, "--doctor")
    assert _printed(healthy.stdout, "RESULT") == plain
    assert "no trainable variables" not in healthy.stderr
    report = _printed(healthy.stdout, "DOCTOR")
    assert report["status"] == "healthy" and report["steps_watched"] == 20

    failing = _python(TRAIN_STEP, "--nan", "--doctor")
    report = _printed(failing.stdout, "DOCTOR")
    assert report["status"] == "problem", failing.stderr[-3000:]
    _assert_problem(
        report["problems"][0], "backward_singularity", "SqrtGrad", TRAIN_STEP, "tf.sqrt(", 7
    )
    assert "backward_singularity at step 7" in failing.stderr  # printed as it is found


# --- Layers made in build(), compile's loss, RMSprop's slots made at the first update --------


def test_layers_built_on_first_call_run_is_bit_identical(tmp_path, onednn_on):
    plain = _printed(_python(BLOCKS).stdout, "RESULT")
    run = run_doctor(BLOCKS, tmp=tmp_path, options=NO_TRIALS)
    assert _printed(run.stdout, "RESULT") == plain
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["steps_watched"] == 32


def test_layers_built_on_first_call_forward_nan_is_diagnosed(tmp_path):
    run = run_doctor(BLOCKS, "--nan", tmp=tmp_path, options=NO_TRIALS)
    assert run.exit_code == 1
    _assert_problem(run.problem, "forward_domain", "Log", BLOCKS, "tf.math.log(", 4)
    assert run.problem["phase"] == "forward"


# --- watch() on a custom loop whose model and optimizer slots appear at the first step -------


def test_watched_loop_with_lazy_model_is_bit_identical_and_diagnosed(onednn_on):
    plain = _printed(_python(WATCH_LOOP, "--plain").stdout, "RESULT")
    watched = _python(WATCH_LOOP)
    assert _printed(watched.stdout, "RESULT") == plain
    report = _printed(watched.stdout, "DOCTOR")
    assert report["status"] == "healthy" and report["steps_watched"] == 10

    failing = _python(WATCH_LOOP, "--nan")
    report = _printed(failing.stdout, "DOCTOR")
    problem = report["problems"][0]
    assert problem["category"] == "backward_singularity", failing.stderr[-3000:]
    assert problem["origin"]["gradient_of"] == "Sqrt"  # tf.norm's square root
    assert problem["origin"]["line"] == line_of(WATCH_LOOP, "tf.norm(")
    assert problem["step"] == 5


# --- A skipped update is never silent --------------------------------------------------------


def test_updates_skipped_where_no_step_wrapper_reads_the_guard_are_reported(tmp_path):
    script = "tests/scripts/library_train_step_loop.py"
    run = run_doctor(script, tmp=tmp_path, options=NO_TRIALS)
    assert run.exit_code == 1
    assert "weights finite: True" in run.stdout  # the guard did skip the bad updates
    problem = run.problem
    assert problem["step"] == 5
    assert "the 2 after it were skipped" in problem["explanation"]
    assert "were skipped" in run.stderr


# --- Silent failures end `problem` ----------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "category"),
    [
        ("tests/scripts/silent_deep_sigmoid.py", "vanishing_gradients"),
        ("tests/scripts/silent_saturated_tanh.py", "saturation"),
    ],
)
def test_a_run_that_never_learns_ends_problem(tmp_path, script, category):
    run = run_doctor(script, tmp=tmp_path, options=NO_TRIALS)
    assert run.exit_code == 1, run.stderr[-3000:]
    assert run.report["status"] == "problem"
    (problem,) = run.report["problems"]
    assert problem["category"] == category
    explanation = problem["explanation"]
    assert "the loss did not improve" in explanation or "the loss barely improved" in explanation
    assert category not in [w["category"] for w in run.report["warnings"]]  # not twice
    assert f"problem 1: {category} at step {problem['step']}" in run.stderr


def test_raw_outputs_read_as_probabilities_end_problem_with_fixes_proved_by_reruns(tmp_path):
    script = "tests/scripts/logits_read_as_probabilities.py"
    run = run_doctor(script, tmp=tmp_path, options=("--confirm", "auto"))
    assert run.exit_code == 1, run.stderr[-3000:]
    (problem,) = run.report["problems"]
    assert problem["category"] == "logits_as_probabilities", problem["explanation"]
    assert (problem["step"], problem["phase"], problem["origin"]) == (0, None, None)
    assert "raw output of layer `dense_1`" in problem["explanation"]
    assert [fix["family"] for fix in problem["fixes"]] == ["activation_change", "from_logits"]
    layer, logits = problem["fixes"]
    assert '+        layers.Dense(4, activation="softmax"),' in layer["patch"]
    assert "keras.losses.CategoricalCrossentropy(from_logits=True)" in logits["patch"]
    for fix in (layer, logits):  # each copy learned more than the run, the unchanged one not
        assert fix["verified"] is True, fix["evidence"]
        assert (
            "averaging" in fix["evidence"] and "found logits_as_probabilities" in (fix["evidence"])
        )
    # The run's own losses are untouched: the plain script's accuracy is printed again.
    assert _python(script).stdout.splitlines()[-1] in run.stdout


@pytest.mark.parametrize(
    ("script", "args", "warned"),
    [
        # Saturated like the failing run, but Adam gets it learning: the warning stays one.
        ("tests/scripts/silent_saturated_tanh.py", ("--adam",), "saturation"),
        # Dead units in a frozen layer only: a fact of the extractor, not a failure.
        ("tests/scripts/healthy_frozen_extractor.py", (), "dead_units"),
        ("tests/scripts/healthy_slow_start.py", (), None),
        ("tests/scripts/healthy_small_cnn.py", (), None),
        ("examples/healthy_dqn_target_network.py", (), None),
        ("examples/healthy_gan_discriminator.py", (), None),
    ],
)
def test_healthy_runs_are_never_flagged_as_silent_failures(
    doctor_run, tmp_path, script, args, warned
):
    # Without arguments, the session's one run of the script (shared with other tests).
    run = run_doctor(script, *args, tmp=tmp_path) if args else doctor_run(script)
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy"
    if warned is not None:
        assert warned in [w["category"] for w in run.report["warnings"]]


# --- Zero gradients behind dead or saturated units are named for what they are ------------


def test_relus_killed_by_one_huge_update_are_dead_units_with_the_cause(tmp_path):
    script = "tests/scripts/dead_relu_high_learning_rate.py"
    run = run_doctor(script, tmp=tmp_path, options=NO_TRIALS)
    assert run.exit_code == 1
    (problem,) = run.report["problems"]
    assert problem["category"] == "dead_units", problem["explanation"]
    assert problem["disconnected"] is None
    text = problem["explanation"]
    assert "Every ReLU unit of layer `sequential/dense_1` outputs 0 for every example" in text
    assert "It followed a huge update with a learning rate of 0.5" in text
    assert "the gradient norm reached" in text and "at step 1" in text
    families = [fix["family"] for fix in problem["fixes"]]
    assert families[0] == "lower_learning_rate" and "straight_through" not in families
    assert "learning_rate=0.05" in problem["fixes"][0]["code"]
    assert "problem 1: dead_units at step" in run.stderr


def test_exactly_zero_gradients_of_saturated_tanh_units_are_saturation(tmp_path):
    run = run_doctor(
        "tests/scripts/silent_saturated_tanh.py", "--feet", tmp=tmp_path, options=NO_TRIALS
    )
    assert run.exit_code == 1
    (problem,) = run.report["problems"]
    assert problem["category"] == "saturation", problem["explanation"]
    assert "layer `sequential/dense`" in problem["explanation"]
    assert "stuck from the first step" in problem["explanation"]
    assert problem["disconnected"] is None
