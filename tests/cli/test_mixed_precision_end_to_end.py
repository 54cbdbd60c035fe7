"""End to end through the real CLI: mixed precision (`mixed_float16`, a LossScaleOptimizer)."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT, line_of

pytestmark = pytest.mark.slow


def _printed(text: str) -> list[str]:
    """The lines a script printed about its own results (losses, scale, weights)."""
    prefixes = ("losses ", "loss scale ", "updates applied ", "weights ")
    return [line for line in text.splitlines() if line.startswith(prefixes)]


def test_normal_loss_scale_adjustments_are_healthy_and_change_nothing(doctor_run):
    script = "tests/scripts/mixed_float16_healthy.py"
    plain = subprocess.run(
        [sys.executable, script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    run = doctor_run(script)
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy"
    assert run.report["problems"] == []
    assert run.report["steps_watched"] == 4 * 8
    assert len(_printed(plain.stdout)) == 4
    assert _printed(run.stdout) == _printed(plain.stdout)  # bit-identical losses and weights
    applied = int(next(line for line in _printed(plain.stdout) if "applied" in line).split()[-1])
    assert applied < 4 * 8  # the first steps really overflowed and were skipped


def test_float16_overflow_in_the_forward_pass_is_localized(doctor_run):
    script = "tests/scripts/mixed_float16_exp_overflow.py"
    run = doctor_run(script)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"], problem["phase"]) == (
        "forward_overflow",
        3,
        "forward",
    )
    origin = problem["origin"]
    assert origin["op"] == "Exp"
    assert origin["line"] == line_of(script, "tf.exp(h)")
    assert origin["inputs"][0]["dtype"] == "float16"
    assert "float16 exp overflows above 11.09" in problem["explanation"]
    island = next(fix for fix in problem["fixes"] if fix["family"] == "float32_island")
    assert 'tf.exp(tf.cast(h, "float32"))' in island["code"]
    not_fixes = {item["remedy"]: item["why"] for item in problem["not_fixes"]}
    assert "already on" in not_fixes["loss_scaling"]
    assert "gradient_clipping" in not_fixes


def test_a_collapsed_loss_scale_is_reported(doctor_run):
    run = doctor_run("tests/scripts/mixed_float16_scale_collapse.py")
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"]) == ("loss_scale_collapse", 15)
    assert "lowered to 1" in problem["explanation"]
    assert problem["fixes"][0]["family"] == "float32_island"
    assert "loss_scaling" in [item["remedy"] for item in problem["not_fixes"]]
