"""End to end through the real CLI: a weight or statistic already NaN before the first
step is bad_input naming the variable, its layer and the call that wrote it."""

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, line_of, run_doctor

pytestmark = pytest.mark.slow


def test_a_nan_left_by_adapt_names_the_statistic_and_the_adapt_line(tmp_path):
    script = "tests/scripts/normalization_adapt_missing.py"
    run = run_doctor(script, tmp=tmp_path, options=("--trial-steps", "0"))
    assert run.exit_code == 1, run.stderr[-3000:]
    problem, origin = run.problem, run.problem["origin"]
    assert (problem["category"], problem["step"]) == ("bad_input", 0)
    assert (origin["variable"], origin["layer"]) == ("normalization/mean", "normalization")
    assert origin["source_kind"] == "state_write"
    assert origin["line"] == line_of(script, "normalizer.adapt(table)")
    assert "`normalization/variance`" in problem["explanation"]
    assert "`adapt` learns its statistics from the data" in problem["explanation"]
    fix = problem["fixes"][0]
    assert fix["family"] == "clean_input"
    assert "table = table[finite]" in fix["code"] and "normalizer.adapt(table)" in fix["code"]
    assert {n["remedy"] for n in problem["not_fixes"]} == {
        "gradient_clipping",
        "lower_learning_rate",
    }


def test_set_weights_with_a_nan_names_the_kernel_and_the_set_weights_line(tmp_path):
    script = "tests/scripts/set_weights_nan.py"
    run = run_doctor(script, tmp=tmp_path, options=("--trial-steps", "0"))
    assert run.exit_code == 1, run.stderr[-3000:]
    problem, origin = run.problem, run.problem["origin"]
    assert (problem["category"], problem["step"]) == ("bad_input", 0)
    assert origin["op"] == "ReadVariableOp"
    assert re.fullmatch(r"sequential(_\d+)?/output/kernel", origin["variable"])
    assert origin["layer"] == origin["variable"].rsplit("/", 1)[0]
    assert origin["source_kind"] == "state_write"
    assert origin["line"] == line_of(script, "model.set_weights(saved)")
    assert "1 NaN value" in problem["explanation"]
    assert problem["fixes"][0]["family"] == "finite_weights"


def test_adapt_on_clean_data_stays_healthy_and_trains_bit_identically(tmp_path):
    script = "tests/scripts/normalization_adapt_healthy.py"
    run = run_doctor(script, tmp=tmp_path)
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy" and run.report["problems"] == []
    plain = subprocess.run(
        [sys.executable, script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    losses = [line for line in plain.stdout.splitlines() if line.startswith("losses:")]
    assert losses and losses[0] in run.stdout.splitlines()
