"""`tf.distribute.MirroredStrategy` on two logical CPUs, through the real CLI."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT, line_of, run_doctor

pytestmark = pytest.mark.slow

SCRIPT = "tests/scripts/mirrored_overflow.py"


@pytest.fixture(scope="module")
def overflow_run(tmp_path_factory):
    return run_doctor(SCRIPT, tmp=tmp_path_factory.mktemp("mirrored"))


def test_the_replica_whose_shard_overflowed_is_named_with_the_op(overflow_run):
    assert overflow_run.exit_code == 1, overflow_run.stderr[-3000:]
    problem = overflow_run.report["problems"][0]
    assert (problem["category"], problem["step"], problem["replica"]) == ("forward_overflow", 3, 1)
    origin = problem["origin"]
    assert origin["op"] == "Exp"
    assert origin["line"] == line_of(SCRIPT, "return tf.exp(inputs)")
    assert origin["inputs"][0]["shape"] == [16, 4]  # the replica's shard, not the whole batch
    assert origin["inputs"][0]["max"] == 500.0
    assert "Replica 1 of 2" in problem["explanation"]
    assert "could not try the fixes" not in overflow_run.stderr  # trials skip replicas cleanly


def test_every_replica_skipped_the_bad_update(overflow_run):
    assert "replica copies: 2, identical: True, finite: True" in overflow_run.stdout


def _losses(command):
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if line.startswith(("losses", "kernel"))]


def test_watching_a_healthy_mirrored_run_changes_nothing(tmp_path):
    plain = _losses([sys.executable, SCRIPT, "--healthy"])
    watched = run_doctor(SCRIPT, "--healthy", tmp=tmp_path)
    assert watched.exit_code == 0, watched.stderr[-3000:]
    lines = [line for line in watched.stdout.splitlines() if line.startswith(("losses", "kernel"))]
    assert lines == plain and len(plain) == 2


def test_multi_worker_strategy_with_one_worker_is_watched(tmp_path):
    run = run_doctor("tests/scripts/multi_worker_single_nan.py", tmp=tmp_path)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.report["problems"][0]
    assert (problem["category"], problem["step"]) == ("bad_input", 2)
    assert problem["replica"] is None  # one replica: nothing to say about which
    assert "row 6, feature column 1" in problem["explanation"]
    assert "weights finite: True" in run.stdout


CUSTOM_LOOP = "tests/scripts/mirrored_custom_loop_iterator.py"


def test_a_custom_loop_under_a_strategy_replays_the_failing_replicas_function(tmp_path):
    run = run_doctor(CUSTOM_LOOP, tmp=tmp_path)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.report["problems"][0]
    assert (problem["category"], problem["step"], problem["replica"]) == (
        "backward_singularity",
        2,
        1,
    )
    origin = problem["origin"]
    assert (origin["op"], origin["gradient_of"]) == ("SqrtGrad", "Sqrt")
    assert origin["line"] == line_of(CUSTOM_LOOP, "return tf.sqrt(")
    assert origin["inputs"][0]["shape"] == [8, 1]  # replica 1's shard of the batch
    assert run.report["steps_watched"] == 3  # stopped at the failing step


def test_watching_a_healthy_custom_loop_under_a_strategy_changes_nothing(tmp_path):
    plain = _losses([sys.executable, CUSTOM_LOOP, "--healthy"])
    watched = run_doctor(CUSTOM_LOOP, "--healthy", tmp=tmp_path)
    assert watched.exit_code == 0, watched.stderr[-3000:]
    lines = [line for line in watched.stdout.splitlines() if line.startswith("losses")]
    assert lines == plain and len(plain[0].split()) == 7
