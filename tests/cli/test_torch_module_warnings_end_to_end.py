"""`gradient-doctor run` on unchanged torch scripts: the per-module statistics reach the
early-warning detectors, which warn of a block whose ReLUs all died, by its module path
and with fixes spelled in PyTorch, and stay silent on a healthy run."""

import shutil

import pytest

from tests.conftest import ROOT, run_doctor

pytestmark = pytest.mark.slow

SCRIPTS = ROOT / "tests/scripts/torch"


def _run(name, tmp_path):
    shutil.copy(SCRIPTS / name, tmp_path / name)
    return run_doctor(name, tmp=tmp_path, cwd=tmp_path)


def test_a_block_whose_relus_all_died_is_warned_of_by_its_module_path(tmp_path):
    run = _run("dead_relu_block.py", tmp_path)
    assert run.exit_code == 0, run.stderr[-3000:]
    assert (run.report["status"], run.report["problems"]) == ("healthy", [])
    (warning,) = run.report["warnings"]
    assert warning["category"] == "dead_units"
    assert "`trunk.2` (100% since step 0)" in warning["explanation"]
    assert "`trunk.0`" not in warning["explanation"] and "skip" not in warning["explanation"]
    codes = " ".join(fix["code"] for fix in warning["fixes"])
    assert "nn.LeakyReLU" in codes and "kaiming_normal_" in codes and "keras" not in codes
    assert "step 200 loss" in run.stdout  # the script ran to its end


def test_a_healthy_tanh_and_relu_script_gets_no_warning(tmp_path):
    run = _run("healthy_tanh_relu_mlp.py", tmp_path)
    assert run.exit_code == 0, run.stderr[-3000:]
    report = run.report
    assert (report["status"], report["problems"], report["warnings"]) == ("healthy", [], [])
    assert report["steps_watched"] == 15 * 16


def test_sampling_every_step_measures_every_step(tmp_path):
    # What the reruns that confirm fixes use, so that units a patch killed are warned of
    # within them; sampling every step once measured nothing at all (each step's sample
    # was taken over by the next before it was read).
    shutil.copy(SCRIPTS / "dead_relu_block.py", tmp_path / "dead_relu_block.py")
    options = ("--sample-every", "1", "--stop-after", "40")
    run = run_doctor("dead_relu_block.py", tmp=tmp_path, cwd=tmp_path, options=options)
    assert run.exit_code == 0, run.stderr[-3000:]
    series = {s["name"]: s for s in run.report["series"]}
    dead = series["dead_fraction/trunk.2"]
    assert dead["steps"] == list(range(40)) and set(dead["values"]) == {1.0}
    (warning,) = run.report["warnings"]
    # Warned after 20 records in a row: 20 steps, not the default sampling's 200.
    assert (warning["category"], warning["step"]) == ("dead_units", 19)
    assert "`trunk.2` (100% since step 0)" in warning["explanation"]
