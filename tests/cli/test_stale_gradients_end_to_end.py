"""Gradients never reset between a PyTorch optimizer's updates, through the real CLI:
proved by values, fixed by a `zero_grad()` after the step that holds when applied; a
reset done the old way (`p.grad.data.zero_()`) is no such thing."""

import shutil
import subprocess

import pytest

from tests.conftest import ROOT, line_of, run_doctor

pytestmark = pytest.mark.slow

STALE = "tests/scripts/torch/zero_grad_once_per_epoch.py"


def test_gradients_reset_once_per_epoch_are_stale_and_the_reset_after_the_step_holds(tmp_path):
    run = run_doctor(STALE, tmp=tmp_path, options=("--trial-steps", "0"))
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"]) == ("stale_gradients", 2)
    assert "plus this step's" in problem["explanation"], problem["explanation"]
    (fix,) = problem["fixes"]
    assert fix["family"] == "reset_gradients"
    step = line_of(STALE, "opt.step()")
    assert f"+{' ' * 12}opt.zero_grad()" in fix["patch"], fix["patch"]
    assert f"@@ -{step - 2},4 +{step - 2},5 @@" in fix["patch"], fix["patch"]
    # Applied by hand to a copy, the script trains healthy to its end.
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "tests/scripts/torch", copy / "tests/scripts/torch")
    subprocess.run(["patch", "-p1", "--batch"], input=fix["patch"], text=True, cwd=copy, check=True)
    rerun = run_doctor(STALE, tmp=tmp_path, cwd=copy, options=("--trial-steps", "0"))
    assert (rerun.report["status"], rerun.report["problems"]) == ("healthy", [])
    assert rerun.report["steps_watched"] == 80


def test_gradients_reset_the_old_way_are_not_stale(tmp_path):
    run = run_doctor("tests/scripts/torch/healthy_manual_grad_reset.py", tmp=tmp_path)
    assert run.exit_code == 0, run.stderr[-3000:]
    assert (run.report["status"], run.report["problems"]) == ("healthy", [])
    assert run.report["steps_watched"] == 40
