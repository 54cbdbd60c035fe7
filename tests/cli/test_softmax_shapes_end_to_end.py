"""End to end through the real CLI: hand-written softmaxes normalised over segments, under a
mask, with -inf written before exp, and over a middle axis. Each is named at its exp line
with a verified max-shift for the groups it sums over, and its printed patch, applied with
`patch -p1` to a copy of the script's folder, trains healthy."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, doctor_command, line_of, run_doctor

pytestmark = pytest.mark.slow

# script -> (the exp's line, what the shift must say)
CASES = {
    "tests/scripts/gnn_segment_softmax_loop.py": (
        "e = tf.exp(scores)",
        "e = tf.exp(scores - tf.gather(tf.math.unsorted_segment_max(scores, receivers, NODES), "
        "receivers))",
    ),
    "tests/scripts/masked_attention_fit.py": (
        "e = tf.exp(scores) * mask",
        "e = tf.exp(tf.where(mask != 0, scores - tf.reduce_max(tf.where(mask != 0, scores, "
        'float("-inf")), axis=-1, keepdims=True), float("-inf"))) * mask',
    ),
    "tests/scripts/minus_inf_mask_attention_loop.py": (
        "e = tf.exp(tf.where(valid",
        'tf.maximum(tf.reduce_max(tf.where(valid, scores, float("-inf")), axis=-1, '
        "keepdims=True), tf.float32.min)",
    ),
    "tests/scripts/middle_axis_softmax_fit.py": (
        "w = tf.exp(scores)",
        "w = tf.exp(scores - tf.reduce_max(scores, axis=1, keepdims=True)) / tf.reduce_sum("
        "tf.exp(scores - tf.reduce_max(scores, axis=1, keepdims=True)), axis=1, keepdims=True)",
    ),
}
_runs: dict[str, object] = {}


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    """One short run per script (10 trial steps, no confirming rerun), shared by its tests."""

    def get(script: str):
        if script not in _runs:
            tmp = tmp_path_factory.mktemp(Path(script).stem)
            options = ("--trial-steps", "10", "--confirm", "never")
            _runs[script] = run_doctor(script, tmp=tmp, options=options)
        return _runs[script]

    return get


def _stable_softmax(problem: dict) -> dict:
    (fix,) = [f for f in problem["fixes"] if f["family"] == "stable_softmax"]
    return fix


@pytest.mark.parametrize("script", sorted(CASES))
def test_the_exp_is_named_with_a_verified_shift_for_its_groups(diagnosed, script):
    run = diagnosed(script)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["phase"]) == ("forward_overflow", "forward")
    origin = problem["origin"]
    exp_line, shift = CASES[script]
    assert (origin["op"], origin["file"]) == ("Exp", script)
    assert origin["line"] == line_of(script, exp_line)
    fix = _stable_softmax(problem)
    assert fix["verified"] is True, fix
    assert shift in fix["code"].splitlines()[0]
    assert f"+++ b/{script}" in fix["patch"] and shift in fix["patch"]
    assert problem["fixes"][0]["family"] == "stable_softmax"  # the cause, before the rest


@pytest.mark.parametrize("script", sorted(CASES))
def test_the_printed_patch_applied_to_a_copy_trains_healthy(diagnosed, script, tmp_path):
    patch_text = _stable_softmax(diagnosed(script).problem)["patch"]
    copy = tmp_path / "work"
    shutil.copytree(ROOT / Path(script).parent, copy / Path(script).parent)
    applied = subprocess.run(
        ["patch", "-p1"], input=patch_text, cwd=copy, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    report = tmp_path / "patched.json"
    rerun = subprocess.run(
        [*doctor_command(), "run", "--trial-steps", "0", "--confirm", "never"]
        + ["--report", str(report), script],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    patched = json.loads(report.read_text())
    assert (patched["status"], patched["problems"]) == ("healthy", [])
    original = (ROOT / script).read_text()
    assert (copy / script).read_text() != original  # the copy ran the patch, not the script
