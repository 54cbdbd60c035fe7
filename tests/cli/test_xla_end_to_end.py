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
    assert "disable_xla" in [fix["family"] for fix in problem["fixes"]]
