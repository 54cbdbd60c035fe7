"""End to end through the real CLI: steps compiled with XLA (`jit_compile=True`)."""

import numpy as np
import pytest

from tests.conftest import line_of

pytestmark = pytest.mark.slow


def _xla_sums_this_row_differently() -> bool:
    """The premise of the sum-order script: eager Sum gives 0 here, XLA's overflows."""
    tf = pytest.importorskip("tensorflow")
    row = tf.constant(np.array([[2e38] * 8 + [-2e38] * 8], "float32"))

    def total(values):
        return tf.reduce_sum(values, axis=-1)

    eager = total(row).numpy()
    compiled = tf.function(total, jit_compile=True)(row).numpy()
    return bool(np.isfinite(eager).all() and not np.isfinite(compiled).all())


def test_forward_overflow_under_xla_is_localized(doctor_run):
    script = "tests/scripts/xla_exp_overflow.py"
    run = doctor_run(script)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"], problem["phase"]) == (
        "forward_overflow",
        3,
        "forward",
    )
    assert problem["origin"]["op"] == "Exp"
    assert problem["origin"]["line"] == line_of(script, "tf.exp(scores)")
    assert "XLA" not in problem["explanation"]  # it reproduced: nothing to say about XLA


def test_value_that_only_xla_makes_non_finite_is_said_plainly(doctor_run):
    if not _xla_sums_this_row_differently():
        pytest.skip("on this machine eager and XLA sum the row in the same order")
    run = doctor_run("tests/scripts/xla_sum_order.py")
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"]) == ("xla_only", 2)
    assert problem["origin"] is None  # no op of the eager replay is blamed
    assert "did not reproduce without XLA" in problem["explanation"]
    # Turning XLA off is a patch of the user's compile line, proved by a patched copy
    # run from the start (no op was named, so nothing was tried inside the run).
    fix = next(fix for fix in problem["fixes"] if fix["family"] == "disable_xla")
    assert fix["code"] == 'model.compile(optimizer="sgd", loss="mse", jit_compile=False)'
    assert '-model.compile(optimizer="sgd", loss="mse", jit_compile=True)' in fix["patch"]
    assert fix["verified"] is True and "patched copy" in fix["evidence"], fix["evidence"]


def test_a_guard_that_holds_only_without_xla_is_not_verified(doctor_run):
    # The trials compile the step as the user's run did: with XLA. Traced without it,
    # the log's guard held on the failing batch (0 -> 1e-7) and was marked verified,
    # though applied, XLA's sum is inf there and the guard does nothing.
    if not _xla_sums_this_row_differently():
        pytest.skip("on this machine eager and XLA sum the row in the same order")
    script = "tests/scripts/xla_log_balanced_sum.py"
    run = doctor_run(script)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"], problem["origin"]["op"]) == (
        "forward_domain",
        2,
        "Log",
    )
    assert problem["origin"]["line"] == line_of(script, "score = tf.math.log(net) @ w")
    guard = next(fix for fix in problem["fixes"] if fix["family"] == "safe_log")
    assert guard["verified"] is False
    assert "not finite again at trial step 1" in guard["evidence"]
