"""End to end through the real CLI: varied training styles, each diagnosed exactly."""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT, line_of, run_doctor

pytestmark = pytest.mark.slow
_NO_CACHE = shutil.ignore_patterns("__pycache__")


def _diagnosed_without_trials(script: str, tmp_path) -> dict:
    """The first problem of a `gradient-doctor run --trial-steps 0` of `script` (exit 1)."""
    run = run_doctor(script, tmp=tmp_path, options=("--trial-steps", "0"))
    assert run.exit_code == 1, run.stderr[-3000:]
    return run.problem


def test_where_trap_in_a_subclassed_model_is_a_backward_singularity(doctor_run):
    run = doctor_run("tests/scripts/where_trap_subclassed.py")
    assert run.exit_code == 1
    problem = run.problem
    assert problem["category"] == "backward_singularity"
    assert problem["phase"] == "backward"
    assert problem["origin"]["op"] == "Reciprocal"
    assert problem["origin"]["gradient_of"] == "Log"
    assert problem["origin"]["file"] == "tests/scripts/where_trap_subclassed.py"
    assert problem["origin"]["line"] == line_of(
        "tests/scripts/where_trap_subclassed.py", "tf.math.log(p)"
    )
    assert "safe_where" in [f["family"] for f in problem["fixes"]]


def test_masked_attention_with_minus_infinity_is_healthy(doctor_run):
    run = doctor_run("tests/scripts/attention_mask_healthy.py")
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy"
    assert run.report["problems"] == []
    assert run.report["steps_watched"] == 8


def test_a_bias_that_cancels_in_a_pair_difference_is_no_broken_path(doctor_run):
    # Its gradient is exactly zero on all 80 steps while its layer's kernel trains.
    run = doctor_run("tests/scripts/healthy_pair_contrastive_fit.py")
    assert run.exit_code == 0, run.stderr[-3000:]
    assert (run.report["status"], run.report["problems"]) == ("healthy", [])
    assert run.report["steps_watched"] == 80


def test_zero_gradients_at_a_loss_of_exactly_zero_are_convergence(doctor_run):
    run = doctor_run("tests/scripts/hinge_converged_fit.py")
    assert run.exit_code == 0, run.stderr[-3000:]
    assert (run.report["status"], run.report["problems"]) == ("healthy", [])
    loss = next(s for s in run.report["series"] if s["name"] == "loss")
    assert loss["values"][-60:] == [0.0] * 60  # the window the zero gradients were seen in


def test_a_one_pass_variance_is_named_and_computed_by_the_frameworks_own(doctor_run, tmp_path):
    script = "tests/scripts/one_pass_variance_layer.py"
    problem = doctor_run(script).problem
    assert (problem["category"], problem["origin"]["op"]) == ("forward_domain", "Sqrt")
    assert problem["origin"]["line"] == line_of(script, "tf.sqrt(var + 1e-6)")
    explanation = problem["explanation"]
    assert "Its input is a variance computed in one pass, E[x^2] - E[x]^2" in explanation
    assert "negative by design" not in explanation
    assert "the data itself carries this value" not in explanation  # the formula's doing
    fix = next(f for f in problem["fixes"] if f["family"] == "two_pass_variance")
    assert fix["verified"] is True, fix["evidence"]
    assert "+        var = tf.math.reduce_variance(x, axis=-1, keepdims=True)" in fix["patch"]
    # Applied by hand to a copy, the script trains to its end with every value finite.
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "tests/scripts", copy / "tests/scripts", ignore=_NO_CACHE)
    subprocess.run(["patch", "-p1", "--batch"], input=fix["patch"], text=True, cwd=copy, check=True)
    rerun = run_doctor(script, tmp=tmp_path, cwd=copy, options=("--trial-steps", "0"))
    assert (rerun.report["status"], rerun.report["problems"]) == ("healthy", [])


def test_nan_in_the_data_is_bad_input_with_row_and_feature(doctor_run):
    run = doctor_run("tests/scripts/bad_input_fit.py")
    assert run.exit_code == 1
    problem = run.problem
    assert problem["category"] == "bad_input"
    assert problem["step"] == 2
    assert "row 6" in problem["explanation"]
    assert "2" in problem["explanation"]  # the feature column


def test_missing_sample_weights_are_left_out_by_a_patch_of_the_fit_call(doctor_run, tmp_path):
    script = "tests/scripts/sample_weight_missing_fit.py"
    problem = doctor_run(script).problem
    assert (problem["category"], problem["step"]) == ("bad_input", 6)
    assert "`sample_weight` (50) has 1 NaN in row 44" in problem["explanation"]
    fix = problem["fixes"][0]
    assert fix["family"] == "clean_input"
    assert fix["title"].startswith(
        "Leave out the 3 of 1200 examples that hold NaN or Inf in `sample_weight`"
    )
    assert fix["verified"] is True, fix["evidence"]
    assert "+        sample_weight=revenue_weight[finite_rows]," in fix["patch"]
    # A lower rate or clipping was tried too, and failed at once: the data is the cause.
    assert all("not finite again at trial step" in n["evidence"] for n in problem["not_fixes"])
    # Applied by hand to a copy, the script trains its two epochs with finite losses.
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "tests/scripts", copy / "tests/scripts", ignore=_NO_CACHE)
    subprocess.run(["patch", "-p1", "--batch"], input=fix["patch"], text=True, cwd=copy, check=True)
    done = subprocess.run(
        [sys.executable, script], cwd=copy, capture_output=True, text=True, check=True
    )
    first, last = (float(v) for v in done.stdout.split("losses")[1].split())
    assert last < first < 1.0, done.stdout


def test_eager_loop_log_of_negative_value_is_a_forward_domain_error(doctor_run):
    run = doctor_run("tests/scripts/eager_log_domain.py")
    assert run.exit_code == 1
    problem = run.problem
    assert problem["category"] == "forward_domain"
    assert problem["phase"] == "forward"
    assert problem["origin"]["op"] == "Log"
    assert problem["origin"]["file"] == "tests/scripts/eager_log_domain.py"
    assert problem["origin"]["line"] == line_of(
        "tests/scripts/eager_log_domain.py", "tf.math.log(rate - offset)"
    )
    assert "gradient_clipping" in [n["remedy"] for n in problem["not_fixes"]]


def test_cheap_mode_keeps_the_global_series_and_drops_the_per_layer_ones(tmp_path):
    full = run_doctor("tests/scripts/bad_input_fit.py", tmp=tmp_path / "full")
    cheap = run_doctor(
        "tests/scripts/bad_input_fit.py", tmp=tmp_path / "cheap", options=("--cheap",)
    )
    assert full.exit_code == cheap.exit_code == 1
    names = {
        mode: {s["name"] for s in run.report["series"]}
        for mode, run in (("full", full), ("cheap", cheap))
    }
    assert {"loss", "grad_norm/global"} <= names["cheap"]
    assert any(name.startswith("weight_norm/") for name in names["full"])
    assert not any("/" in name and not name.endswith("/global") for name in names["cheap"])
    assert cheap.report["problems"][0]["category"] == full.report["problems"][0]["category"]


def test_finite_gradients_whose_norm_overflows_are_stopped_before_adam_writes_nan(tmp_path):
    script = "tests/scripts/huge_finite_gradients.py"
    problem = _diagnosed_without_trials(script, tmp_path)
    assert (problem["category"], problem["step"], problem["phase"]) == (
        "exploding_gradients",
        3,
        None,
    )
    # No op of the step went non-finite: the origin is the update of the variable with
    # the largest gradient, at the line that created its layer.
    assert problem["origin"]["variable"] == "sequential/dense_1/kernel"
    assert problem["origin"]["source_kind"] == "layer_creation"
    assert problem["origin"]["line"] == line_of(script, "model = keras.Sequential(")
    assert "was finite, but their global norm was 5.2e+21" in problem["explanation"]
    assert [n["remedy"] for n in problem["not_fixes"]] == ["gradient_clipping"]
    assert "clip_by_value" in [f["family"] for f in problem["fixes"]]


def test_train_on_batch_loop_is_watched_call_by_call(doctor_run):
    script = "tests/scripts/train_on_batch_sigmoid.py"
    run = doctor_run(script)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert problem["category"] == "forward_overflow"
    assert problem["step"] == 9  # rows 288-319: the first batch with a 120
    assert problem["origin"]["op"] == "Exp"
    assert problem["origin"]["layer"] == "squash"
    assert problem["origin"]["line"] == line_of(script, "ops.exp(t) / (1.0 + ops.exp(t))")
    assert "comes from the batch alone" in problem["explanation"]
    families = [f["family"] for f in problem["fixes"]]
    assert families[0] == "library_function"
    assert "ops.sigmoid(t)" in problem["fixes"][0]["code"]
    # No weight feeds the exp, and it is no softmax: neither remedy is offered.
    assert "constrain_weights" not in families and "stable_softmax" not in families
    assert run.report["steps_watched"] == 10  # stopped at the failing call


def test_data_derived_denominator_in_a_dataset_loop_blames_the_data(doctor_run):
    script = "tests/scripts/dataset_loop_batch_std.py"
    run = doctor_run(script)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"]) == ("forward_domain", 10)
    assert problem["origin"]["op"] == "RealDiv"
    assert problem["origin"]["line"] == line_of(script, "return (t - mean) / std")
    assert "comes from the batch alone" in problem["explanation"]
    why = {n["remedy"]: n["why"] for n in problem["not_fixes"]}
    assert "cannot change it at all" in why["lower_learning_rate"]
    safe_div = next(f for f in problem["fixes"] if f["family"] == "safe_div")
    assert safe_div["verified"] is True


def test_gan_train_step_with_stateful_noise_is_replayed_with_its_own_draws(tmp_path):
    script = "tests/scripts/gan_train_step_noise.py"
    problem = _diagnosed_without_trials(script, tmp_path)
    assert (problem["category"], problem["step"]) == ("forward_domain", 39)
    assert problem["origin"]["op"] == "Log"
    assert problem["origin"]["line"] == line_of(script, "d_loss = -tf.reduce_mean(")
    # The log is taken of a sigmoid's output: the loss should start from the logits.
    fixes = {f["family"]: f for f in problem["fixes"]}
    assert "BinaryCrossentropy(from_logits=True)" in fixes["from_logits"]["code"]


def test_vae_sampling_overflow_names_the_layer_whose_weights_feed_the_exp(tmp_path):
    script = "tests/scripts/vae_sampling_overflow.py"
    problem = _diagnosed_without_trials(script, tmp_path)
    assert (problem["category"], problem["step"]) == ("forward_overflow", 1)
    assert (problem["origin"]["op"], problem["origin"]["layer"]) == ("Exp", "sampling")
    assert problem["origin"]["line"] == line_of(script, "ops.exp(0.5 * z_log_var) * epsilon")
    constrain = next(f for f in problem["fixes"] if f["family"] == "constrain_weights")
    assert "`z_log_var`" in constrain["title"]
    assert "stable_softmax" not in [f["family"] for f in problem["fixes"]]  # no sum follows


def test_float16_mask_literal_out_of_range_is_named_on_its_line(tmp_path):
    script = "tests/scripts/float16_mask_constant.py"
    problem = _diagnosed_without_trials(script, tmp_path)
    assert (problem["category"], problem["step"]) == ("forward_overflow", 0)
    assert problem["origin"]["op"] == "Mul"
    assert problem["origin"]["line"] == line_of(script, "(1.0 - mask) * -1e9")
    assert "1e9 on your line does not fit float16" in problem["explanation"]
    assert problem["fixes"][0]["family"] == "dtype_safe_constant"
    assert "* -1e4" in problem["fixes"][0]["code"]


def test_rnn_blow_up_is_traced_to_the_recurrent_cell_not_the_loss(tmp_path):
    problem = _diagnosed_without_trials("tests/scripts/rnn_relu_growth.py", tmp_path)
    assert (problem["category"], problem["step"]) == ("forward_overflow", 0)
    assert problem["origin"]["op"] == "Square"  # the first inf is the loss's square...
    assert "first grew past 1e6 in layer `sequential/simple_rnn" in problem["explanation"]
    families = [f["family"] for f in problem["fixes"]]
    assert families[:2] == ["constrain_weights", "better_init"]
    assert "simple_rnn" in problem["fixes"][0]["title"]  # ...the cell is where it began


def test_a_root_of_a_signed_difference_gets_the_magnitude_and_no_verified_clamp(doctor_run):
    script = "tests/scripts/signed_root_loss.py"
    problem = doctor_run(script).problem
    assert problem["category"] == "forward_domain"
    assert problem["step"] == 0
    assert problem["origin"]["op"] == "Pow"
    assert problem["origin"]["line"] == line_of(script, "tf.pow(")
    assert "were below 0 at step 0" in problem["explanation"]
    fixes = {fix["family"]: fix for fix in problem["fixes"]}
    assert problem["fixes"][0]["family"] == "magnitude"
    assert fixes["magnitude"]["verified"] is True, fixes["magnitude"]["evidence"]
    assert (
        "+    return tf.reduce_mean(tf.pow(tf.maximum(tf.abs(y_true - y_pred)"
        in (fixes["magnitude"]["patch"])
    )
    clamp = fixes["clip_input_domain"]
    assert clamp["verified"] is None
    assert "all 200 steps finite" in clamp["evidence"]
    assert "its clamp changes" in clamp["evidence"]


def test_a_batch_with_no_label_gets_its_safe_division_proved_by_the_rerun(doctor_run):
    # Inside the run the trial can only repeat the all-masked batch, whose patched loss
    # has no gradient: once judged "did not go on well" and the right fix refuted.
    script = "tests/scripts/masked_mean_missing_labels.py"
    run = doctor_run(script)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"], problem["origin"]["op"]) == (
        "forward_domain",
        10,
        "RealDiv",
    )
    assert problem["origin"]["line"] == line_of(script, "tf.reduce_sum(err) / tf.reduce_sum")
    fix = next(f for f in problem["fixes"] if f["family"] == "safe_div")
    assert fix["verified"] is True, fix["evidence"]
    assert fix["evidence"].startswith("confirmed: the patched copy of your files trained 60 ")
    assert "so whether training goes on cannot be told there" in fix["evidence"]


def test_a_callback_that_exits_on_a_nan_loss_runs_after_the_doctors_check(tmp_path):
    # The doctor's callback ran after the script's: the process exited before the failing
    # batch was diagnosed, and the step could not be run again ("unlocated").
    script = "tests/scripts/fit_callback_exits_on_nan.py"
    run = run_doctor(script, tmp=tmp_path, options=("--trial-steps", "0"))
    assert run.exit_code == 4, run.stderr[-3000:]  # the script's own status
    problem = run.problem
    assert (problem["category"], problem["origin"]["op"]) == ("forward_overflow", "Exp")
    assert problem["origin"]["line"] == line_of(script, "e = tf.exp(logits)")
