"""A forward pass whose values an exp of the user's blew up: the exp's line is named,
and the patch that keeps its input (and the other such exp's) in range holds when
applied by hand and run plainly."""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT, line_of, run_doctor

pytestmark = pytest.mark.slow

SCRIPT = "tests/scripts/vae_log_variance_blowup.py"


def test_a_log_variance_exp_that_blew_up_is_named_and_its_clip_holds(tmp_path):
    run = run_doctor(SCRIPT, tmp=tmp_path, options=("--trial-steps", "0"))
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    # The overflow itself is the squared error of the rebuilt spectra, far downstream.
    assert (problem["category"], problem["step"]) == ("forward_overflow", 0)
    assert problem["origin"]["op"] == "Square"
    sampling = line_of(SCRIPT, "z = mu + tf.exp(0.5 * log_var)")
    kl = line_of(SCRIPT, "tf.exp(log_var)")
    assert f"first grew past 1e6 at Exp ({SCRIPT}:{sampling})" in problem["explanation"]
    assert f"1 more Exp call of the step went past 1e6 too (line {kl})" in problem["explanation"]
    fix = problem["fixes"][0]
    assert fix["family"] == "clip_input_domain"
    assert "tf.exp(tf.minimum(0.5 * log_var, 13.0))" in fix["patch"]
    assert "tf.exp(tf.minimum(log_var, 13.0))" in fix["patch"]

    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "tests/scripts", copy / "tests/scripts")
    subprocess.run(["patch", "-p1", "--batch"], input=fix["patch"], text=True, cwd=copy, check=True)
    plain = subprocess.run(
        [sys.executable, SCRIPT], cwd=copy, capture_output=True, text=True, timeout=300
    )
    assert plain.returncode == 0, plain.stderr[-2000:]
    last = float(plain.stdout.strip().splitlines()[-1].split()[-1])
    assert last == last and abs(last) < float("inf"), plain.stdout  # finite after the fix

    # Unpatched, the same script ends in NaN: the test's script does fail.
    original = subprocess.run(
        [sys.executable, SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert original.stdout.strip().splitlines()[-1] == "last loss nan"
