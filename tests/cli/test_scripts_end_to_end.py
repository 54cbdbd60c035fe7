"""End to end through the real CLI: varied training styles, each diagnosed exactly."""

import pytest

from tests.conftest import line_of, run_doctor

pytestmark = pytest.mark.slow


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


def test_nan_in_the_data_is_bad_input_with_row_and_feature(doctor_run):
    run = doctor_run("tests/scripts/bad_input_fit.py")
    assert run.exit_code == 1
    problem = run.problem
    assert problem["category"] == "bad_input"
    assert problem["step"] == 2
    assert "row 6" in problem["explanation"]
    assert "2" in problem["explanation"]  # the feature column


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
    run = run_doctor(script, tmp=tmp_path, options=("--trial-steps", "0"))
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.report["problems"][0]
    assert (problem["category"], problem["step"], problem["origin"]) == (
        "exploding_gradients",
        3,
        None,
    )
    assert "was finite, but their global norm was 5.2e+21" in problem["explanation"]
    assert [n["remedy"] for n in problem["not_fixes"]] == ["gradient_clipping"]
    assert "clip_by_value" in [f["family"] for f in problem["fixes"]]
