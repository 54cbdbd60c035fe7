"""End to end through the real CLI: eager loops written inline, in the tutorials' style
(a module-level `for` loop with no function around it, a loop inside a plain function, a
`tf.data` iterator), localized like any other step from the trace of their eager ops."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT, line_of, run_doctor

pytestmark = pytest.mark.slow

_runs = {}


def _diagnosed(script: str, tmp_path_factory):
    """The run of `gradient-doctor run --trial-steps 0` on `script` (once per session)."""
    if script not in _runs:
        tmp = tmp_path_factory.mktemp("inline")
        _runs[script] = run_doctor(script, tmp=tmp, options=("--trial-steps", "0"))
    run = _runs[script]
    assert run.exit_code == 1, run.stderr[-3000:]
    return run


def _assert_origin(problem: dict, script: str, code: str, op: str, phase: str, step: int):
    assert problem["step"] == step
    assert problem["phase"] == phase
    origin = problem["origin"]
    assert origin["op"] == op
    assert origin["file"] == script
    assert origin["line"] == line_of(script, code)


def test_a_module_level_loop_names_the_forward_log_that_went_negative(tmp_path_factory):
    script = "tests/scripts/inline_eager_log_domain.py"
    problem = _diagnosed(script, tmp_path_factory).problem
    assert problem["category"] == "forward_domain"
    _assert_origin(problem, script, "tf.math.log(rate - baseline)", "Log", "forward", step=3)
    assert problem["origin"]["inputs"][0]["min"] < 0
    assert "gradient_clipping" in [n["remedy"] for n in problem["not_fixes"]]


def test_a_module_level_loop_names_the_backward_sqrt_of_a_zero_distance(tmp_path_factory):
    script = "tests/scripts/inline_eager_pair_distance.py"
    run = _diagnosed(script, tmp_path_factory)
    problem = run.problem
    assert problem["category"] == "backward_singularity"
    _assert_origin(problem, script, "tf.sqrt(tf.reduce_sum(", "SqrtGrad", "backward", step=4)
    assert problem["origin"]["gradient_of"] == "Sqrt"
    assert "safe_sqrt" in [f["family"] for f in problem["fixes"]]
    # The failing update never reached the weights: they are still those before step 4.
    printed = dict(line.rsplit(" ", 1) for line in run.stdout.splitlines() if "weights" in line)
    assert printed["weights at exit"] == printed["weights before step 4"]
    assert "step 4 loss" not in run.stdout  # training stopped inside that step's update


def test_a_loop_in_a_plain_function_names_the_log_of_a_saturated_sigmoid(tmp_path_factory):
    script = "tests/scripts/inline_eager_function_loop.py"
    problem = _diagnosed(script, tmp_path_factory).problem
    assert problem["category"] == "forward_domain"
    _assert_origin(problem, script, "tf.math.log(1 - p)", "Log", "forward", step=8)
    # Of the two logs on that line, the one that ran into 0 is the origin; the patch
    # guards it, and the other, whose probability came within 4e-6 of 0, with it.
    (safe_log,) = [f for f in problem["fixes"] if f["family"] == "safe_log"]
    assert "tf.math.log(tf.maximum(1 - p, " in safe_log["patch"]
    assert "y * tf.math.log(tf.maximum(p, " in safe_log["patch"]
    assert "Also guarded: the other log at line" in problem["explanation"]


def test_a_loop_over_a_dataset_iterator_with_dropout_names_its_log(tmp_path_factory):
    script = "tests/scripts/inline_eager_dataset_dropout.py"
    problem = _diagnosed(script, tmp_path_factory).problem
    assert problem["category"] == "forward_domain"
    _assert_origin(
        problem, script, "log_error = tf.math.log(prediction + 1.0)", "Log", "forward", step=13
    )
    # The values the step saw with its own dropout mask: the log's argument below 0.
    assert problem["origin"]["inputs"][0]["min"] < 0


def _printed(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("step ")]


def test_a_healthy_inline_loop_is_healthy_and_bit_identical_to_a_plain_run(doctor_run):
    script = "tests/scripts/inline_eager_healthy.py"
    plain = subprocess.run(
        [sys.executable, script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    run = doctor_run(script)
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy"
    assert run.report["problems"] == []
    assert run.report["steps_watched"] == 12
    assert len(_printed(plain.stdout)) == 12
    assert _printed(run.stdout) == _printed(plain.stdout)  # exact losses and weights


def test_a_crash_dump_of_an_inline_step_is_refused_not_written_wrong(tmp_path):
    script = "tests/scripts/inline_eager_log_domain.py"
    dump = tmp_path / "dump"
    run = run_doctor(script, tmp=tmp_path, options=("--trial-steps", "0", "--dump", str(dump)))
    assert run.exit_code == 1, run.stderr[-3000:]
    assert run.problem["origin"]["op"] == "Log"  # the diagnosis does not depend on it
    assert "could not write the crash dump" in run.stderr
    assert "written inline" in run.stderr
    assert not dump.exists()
