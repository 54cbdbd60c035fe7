"""Through the real CLI: the doctor's reruns of a script (the seeded rerun that records the
failing PyTorch step, the confirming reruns of the unchanged and the patched copies) leave
the user's folder as one run of the script left it. The script appends to a log in its
folder every step and, past the failing step, saves over two large files that were there
before the run: a `torch.save` over `model.pt` (a checkpoint: copied into the rerun's
scratch folder, as PyTorch's C++ writer goes past the write guard) and an `np.save` over
`features.npy` (data: linked, its write refused). The log holds one run's lines, both large
files are byte for byte as they were, and the fix whose rerun was stopped says why it was
not confirmed."""

import hashlib
import shutil
from pathlib import Path

import pytest

from gradient_doctor.cli.scratch_copy import LINK_ABOVE_BYTES
from tests.conftest import ROOT, line_of, run_doctor

pytestmark = pytest.mark.slow

SCRIPT = "tests/scripts/torch/appends_log_saves_checkpoints.py"
LARGE = ("model.pt", "features.npy")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def torch_folder(tmp_path_factory):
    """The folder after `gradient-doctor run --confirm always`, the run, and the digests
    of its large files from before the run."""
    folder = tmp_path_factory.mktemp("user_folder")
    name = Path(SCRIPT).name
    shutil.copy(ROOT / SCRIPT, folder / name)
    for large in LARGE:  # just over the size a scratch copy links (sparse, but a header)
        with open(folder / large, "wb") as handle:
            handle.write(b"the user's file, from before the run\n")
            handle.truncate(LINK_ABOVE_BYTES + 1)
    before = {large: _digest(folder / large) for large in LARGE}
    run = run_doctor(
        name, tmp=tmp_path_factory.mktemp("report"), options=("--confirm", "always"), cwd=folder
    )
    return folder, run, before


def test_the_scripts_log_holds_what_one_run_wrote(torch_folder):
    folder, run, _ = torch_folder
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"]) == ("forward_domain", 3)
    line = line_of(SCRIPT, "loss = -torch.log(torch.relu(model(x))).mean()")
    assert (problem["origin"]["op"], problem["origin"]["line"]) == ("log", line)
    assert "the rerun reproduced step 3" in run.stderr
    # The run stopped at step 3's update, before its log line: steps 0 to 2, once each.
    logged = (folder / "train.log").read_text().splitlines()
    assert [entry.split(" loss ")[0] for entry in logged] == ["step 0", "step 1", "step 2"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [Path(SCRIPT).name, "train.log", *LARGE]
    )


def test_large_files_written_by_a_patched_rerun_stay_as_they_were(torch_folder):
    folder, run, before = torch_folder
    assert {large: _digest(folder / large) for large in LARGE} == before
    # Every log input is a relu's zero: its softplus ranks first, then the clamp; the
    # first rerun is stopped, and each later fix gets that rerun's answer.
    softplus, clamp = run.problem["fixes"][:2]
    assert (softplus["family"], clamp["family"]) == ("activation_change", "safe_log")
    refused = (
        f"the rerun of your script tried to write {(folder / 'features.npy').resolve()}, a "
        "large file of your folder that the scratch copy links to instead of copying; it was "
        "stopped so your file stays as it was"
    )
    for fix in (softplus, clamp):
        assert fix["patch"] and fix["verified"] is None, fix
        assert fix["evidence"].startswith(f"not confirmed: {refused}"), fix["evidence"]
    assert f"confirming activation_change: {refused}" in run.stderr
