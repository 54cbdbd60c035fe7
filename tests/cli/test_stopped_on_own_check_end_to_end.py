"""End to end through the real CLI: TensorFlow scripts whose own checks stop or skip a step
whose loss is not finite, before any `tape.gradient` (`tf.debugging.check_numerics`,
which raises, in an eager loop or a compiled step; a `break` at module level, which ends
cleanly; `tf.math.is_nan` and `continue`), so no gradient is ever checked. The step is
found where the script stopped (its test, or the loss it held when it ended), replayed,
and the first op to write a non-finite value named, with a patch that holds when
applied. And `enable_check_numerics()`, left to the doctor."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, line_of, run_doctor

pytestmark = pytest.mark.slow


def _run_in_copy(name: str, tmp_path: Path):
    """The doctor's run of `tests/scripts/<name>` copied alone into a folder."""
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(ROOT / "tests/scripts" / name, folder / name)
    return run_doctor(name, tmp=tmp_path, cwd=folder), folder


def _patched_run(fix: dict, name: str, folder: Path, tmp_path: Path) -> str:
    """What the script prints, run plainly with `fix`'s patch applied (`patch -p1`)."""
    copy = tmp_path / "patched"
    copy.mkdir()
    shutil.copy(folder / name, copy / name)
    subprocess.run(["patch", "-p1", "--batch"], input=fix["patch"], text=True, cwd=copy, check=True)
    done = subprocess.run(
        [sys.executable, name], cwd=copy, capture_output=True, text=True, timeout=300
    )
    return done.stdout


def test_check_numerics_on_the_loss_is_diagnosed_and_the_safe_division_holds(tmp_path):
    name = "inline_eager_check_numerics_exit.py"
    run, folder = _run_in_copy(name, tmp_path)
    assert run.exit_code == 1
    assert "weighted loss : Tensor had Inf values" in run.stderr  # the script's own error
    assert run.report["script_error"].startswith("InvalidArgumentError")
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"]) == (
        "forward_domain",
        "forward",
        7,  # the 8th batch of the first epoch: the stuck sensor's rows
    )
    assert origin["op"] == "RealDiv"
    code = "loss = tf.reduce_mean(tf.square(prediction - y) / spread)"
    assert origin["line"] == line_of(f"tests/scripts/{name}", code)
    assert origin["inputs"][1]["zeros"] == 32
    assert problem["skipped_updates"] == 0
    fix = problem["fixes"][0]
    assert fix["family"] == "safe_div"
    printed = _patched_run(fix, name, folder, tmp_path)
    assert "epoch 2 batch 9 loss" in printed and "nan" not in printed, printed[-500:]


def test_a_module_loop_that_breaks_on_nan_gets_softplus_where_its_layer_is_built(tmp_path):
    # The loop breaks on `not np.isfinite(float(loss))`: NumPy's test, followed, finds the
    # failing step. The variance head is a relu built over
    # three lines (as a formatter writes it): the patch sets its `activation` keyword
    # there; a guard at the log alone would leave the root beside it at 0 (its gradient
    # infinite).
    name = "inline_eager_breaks_on_nan.py"
    run, folder = _run_in_copy(name, tmp_path)
    test_line = line_of(f"tests/scripts/{name}", "if not np.isfinite(float(loss)):")
    assert f"stopped at your own finiteness test, {name}:{test_line}" in run.stderr
    assert run.exit_code == 1 and run.report["status"] == "problem"
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"]) == (
        "forward_domain",
        "forward",
        4,
    )
    assert (origin["op"], origin["line"]) == (
        "Log",
        line_of(f"tests/scripts/{name}", "kl = -0.5 * tf.reduce_mean(1 + tf.math.log(variance)"),
    )
    fix = problem["fixes"][0]
    assert fix["family"] == "activation_change"
    assert '-    4, activation="relu", kernel_initializer="zeros"' in fix["patch"]
    assert '+    4, activation="softplus", kernel_initializer="zeros"' in fix["patch"]
    printed = _patched_run(fix, name, folder, tmp_path)
    assert "step 39 loss" in printed and "nan" not in printed, printed[-500:]


def test_enable_check_numerics_is_left_to_the_doctor_which_names_the_op(tmp_path):
    # Turned on, it would stop at the doctor's own first read of the failing step's
    # values, before any report is written. It is left off, said so, and the op named.
    name = "fit_enable_check_numerics.py"
    run, folder = _run_in_copy(name, tmp_path)
    assert run.exit_code == 1, run.stderr[-3000:]
    assert "enable_check_numerics() is left off while the doctor watches" in run.stderr
    assert "Detected Infinity or NaN" not in run.stderr
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["step"], origin["op"], origin["layer"]) == (
        "forward_domain",
        10,  # the 11th batch: the padding rows
        "RealDiv",
        "row_normalize",
    )
    assert origin["line"] == line_of(f"tests/scripts/{name}", "return rows / tf.norm(rows")
    assert problem["fixes"][0]["family"] == "safe_norm"


def test_check_numerics_inside_a_compiled_step_method_is_diagnosed_and_tried(tmp_path):
    # The check is in the step's graph: the replay and the trials run the step's Python
    # method traced afresh with the check handing its tensor on, so the guard reads it.
    name = "trainer_class_check_numerics.py"
    run, folder = _run_in_copy(name, tmp_path)
    assert run.exit_code == 1
    assert "poisson loss : Tensor had NaN values" in run.stderr  # the script's own error
    assert run.report["script_error"].startswith("InvalidArgumentError")
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"], origin["op"]) == (
        "forward_domain",
        "forward",
        5,  # the batch far outside the rest
        "Log",
    )
    code = "log_likelihood = counts * tf.math.log(rate) - rate"
    assert origin["line"] == line_of(f"tests/scripts/{name}", code)
    assert origin["inputs"][0]["min"] < 0
    fix = problem["fixes"][0]
    assert (fix["family"], fix["verified"]) == ("safe_log", True), fix["evidence"]
    printed = _patched_run(fix, name, folder, tmp_path)
    assert "epoch 2 step 7 loss" in printed and "nan" not in printed, printed[-500:]


def test_a_loop_that_drops_nan_batches_is_stopped_at_its_own_test(tmp_path):
    # `if tf.math.is_nan(loss): continue` drops the batch and trains on, ending with no
    # error; the doctor stops at that test and names the division.
    name = "inline_eager_skips_nan_batches.py"
    run, folder = _run_in_copy(name, tmp_path)
    assert run.exit_code == 1 and run.report["status"] == "problem"
    assert "dropped" not in run.stdout  # stopped in the first epoch, at the test
    test_line = line_of(f"tests/scripts/{name}", "if tf.math.is_nan(loss):")
    assert f"stopped at your own finiteness test, {name}:{test_line}" in run.stderr
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["step"], origin["op"]) == ("forward_domain", 3, "RealDiv")
    assert origin["line"] == line_of(f"tests/scripts/{name}", "return -tf.reduce_mean(dot / norms)")
    assert problem["skipped_updates"] == 0
    fix = problem["fixes"][0]
    assert fix["family"] == "safe_div"
    printed = _patched_run(fix, name, folder, tmp_path)
    assert "epoch 2 loss" in printed and "dropped 0" in printed, printed[-500:]


def test_check_numerics_in_a_lazily_built_model_that_fit_trains_hands_its_tensor_on(tmp_path):
    # In Keras's compiled loop a raising check leaves no batch to replay: the step `fit`
    # runs is traced with the check handing its tensor on (said once), so the guard stops
    # the step, and the trials trace it the same way.
    name = "fit_subclassed_check_numerics.py"
    run, folder = _run_in_copy(name, tmp_path)
    assert run.exit_code == 1, run.stderr[-3000:]
    assert "check_numerics in the step `fit` runs hands its tensor on" in run.stderr
    assert "Tensor had NaN values" not in run.stderr
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["step"], origin["op"], origin["layer"]) == (
        "forward_domain",
        6,  # the batch of padding-only sequences
        "RealDiv",
        "masked_pooling",
    )
    code = "pooled = tf.reduce_sum(weights * tokens, axis=1) / tf.reduce_sum(weights, axis=1)"
    assert origin["line"] == line_of(f"tests/scripts/{name}", code)
    fix = problem["fixes"][0]
    assert (fix["family"], fix["verified"]) == ("safe_div", True), fix["evidence"]
    printed = _patched_run(fix, name, folder, tmp_path)
    assert "Epoch 2/2" in printed and "nan" not in printed, printed[-800:]


def test_a_function_loop_that_stops_on_divergence_and_returns_is_found_in_its_trace(tmp_path):
    # No test the doctor follows, and the loss is gone with the function's frame by the
    # script's clean end: the trace of the step in progress still holds it.
    name = "inline_eager_function_stops_on_divergence.py"
    run, folder = _run_in_copy(name, tmp_path)
    assert "stopping: loss" in run.stdout and "done" in run.stdout
    assert run.exit_code == 1 and run.report["status"] == "problem"
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["step"], origin["op"]) == ("forward_domain", 4, "RealDiv")
    code = "loss = tf.reduce_mean(tf.square(model(xb) - yb) / scale)"
    assert origin["line"] == line_of(f"tests/scripts/{name}", code)
    assert problem["fixes"][0]["family"] == "safe_div"
