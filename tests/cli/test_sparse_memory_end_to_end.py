"""End to end through the real CLI: an embedding's sparse gradients are watched without
densifying them; the peak memory of a watched fit is the plain fit's (measured)."""

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_doctor

pytestmark = pytest.mark.slow

SCRIPT = "tests/scripts/embedding_sparse_memory.py"
TABLE_BYTES = 2_000_000 * 16 * 4  # the dense gradient of the table would be this big


def _growth(output: str) -> int:
    match = re.search(r"peak growth during fit: (\d+) bytes", output)
    assert match, output[-3000:]
    return int(match.group(1))


@pytest.fixture
def allocator_statistics(monkeypatch):
    """TensorFlow keeps CPU allocation statistics only with its BFC allocator."""
    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "true")


def _plain(*args: str) -> int:
    completed = subprocess.run(
        [sys.executable, SCRIPT, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return _growth(completed.stdout)


def _watched(tmp_path, *args: str, options: tuple = ()) -> int:
    run = run_doctor(SCRIPT, *args, tmp=tmp_path, options=options)
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy"
    return _growth(run.stdout)


@pytest.fixture(scope="module")
def sparse_plain_and_dense():
    """Rows read with embedding_lookup and updated by a scatter: a plain step needs no
    memory on the table's scale, so any dense gradient of it would show. Returns the
    plain fit's growth and the control's, whose optimizer densifies the gradient."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "true")
        plain, dense = _plain("--lookup"), _plain("--lookup", "--densify")
    assert dense - plain > 0.75 * TABLE_BYTES  # the measurement does see a dense gradient
    return plain, dense


@pytest.mark.usefixtures("allocator_statistics")
def test_the_guard_keeps_sparse_gradients_sparse(tmp_path, sparse_plain_and_dense):
    plain, _ = sparse_plain_and_dense
    watched = _watched(tmp_path, "--lookup", options=("--cheap",))  # the guard alone
    assert watched - plain < 0.25 * TABLE_BYTES, (plain, watched)


@pytest.mark.usefixtures("allocator_statistics")
def test_sparse_updates_stay_flat_with_per_layer_statistics(tmp_path, sparse_plain_and_dense):
    # Per-layer statistics (on by default) must not read the whole table either: after a
    # sparse read TensorFlow copies a variable on every full read.
    plain, _ = sparse_plain_and_dense
    watched = _watched(tmp_path, "--lookup")
    assert watched - plain < 0.25 * TABLE_BYTES, (plain, watched)


@pytest.mark.usefixtures("allocator_statistics")
def test_keras_embedding_peak_is_unchanged_when_watched(tmp_path):
    # keras.layers.Embedding reads the whole table, so TensorFlow copies it once per
    # update in the plain fit too; watching must add nothing on top of that.
    plain = _plain()
    watched = _watched(tmp_path)
    assert abs(watched - plain) < 0.25 * TABLE_BYTES, (plain, watched)
