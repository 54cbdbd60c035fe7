"""`run --dump DIR` then `replay DIR` on an unchanged PyTorch script, through the real CLI:
the replay runs the dumped aten ops again, names the run's op, file and line, and stays
finite when the dumped batch is made harmless (it recomputes, it does not copy)."""

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.test_dump_replay_end_to_end import replay
from tests.conftest import ROOT, line_of, run_doctor

pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

pytestmark = pytest.mark.slow

SCRIPT = "tests/scripts/torch/module_loop_log_sigmoid.py"
_runs: dict = {}


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    """The script copied alone into a folder, run with `--dump`, once per module."""
    if not _runs:
        folder = tmp_path_factory.mktemp("torch_dump")
        name = Path(SCRIPT).name
        shutil.copy(ROOT / SCRIPT, folder / name)
        dump = folder / "dump"
        run = run_doctor(name, tmp=folder, options=("--dump", str(dump)), cwd=folder)
        _runs["run"] = (run, folder, dump)
    return _runs["run"]


def _replayed(dump: Path, tmp: Path):
    done = replay(dump, tmp / "replay.json")
    path = tmp / "replay.json"
    return done, json.loads(path.read_text()) if path.exists() else None


def test_the_replay_names_the_runs_log_file_and_line(dumped, tmp_path):
    run, folder, dump = dumped
    assert run.exit_code == 1, run.stderr[-3000:]
    assert f"crash dump of step {run.problem['step']} written to {dump}" in run.stderr
    manifest = json.loads((dump / "manifest.json").read_text())
    assert manifest["framework"] == "torch" and manifest["finding"] == run.problem
    assert manifest["left_out"]["leaves"] == [] and manifest["left_out"]["ops"] == []
    shutil.move(folder / Path(SCRIPT).name, tmp_path / "away.py")  # the replay needs no script
    try:
        done, report = _replayed(dump, tmp_path)
    finally:
        shutil.move(tmp_path / "away.py", folder / Path(SCRIPT).name)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "with PyTorch" in done.stderr.splitlines()[0]
    assert report["framework"] == "torch"
    ran, again = run.problem, report["problems"][0]
    for key in ("category", "step", "phase", "explanation"):
        assert again[key] == ran[key], key
    for key in ("op", "op_name", "layer", "file", "line", "code", "gradient_of", "inputs"):
        assert again["origin"][key] == ran["origin"][key], key
    assert (again["origin"]["op"], again["category"]) == ("log", "forward_domain")
    assert again["origin"]["line"] == line_of(SCRIPT, "log_q = torch.log(1 - p)")
    assert "Reproduced: the replay finds what the run found" in done.stderr


def test_a_dumped_batch_made_harmless_replays_finite_and_says_so(dumped, tmp_path):
    _, _, dump = dumped
    tampered = tmp_path / "tampered"
    shutil.copytree(dump, tampered)
    ops = json.loads((tampered / "ops.json").read_text())
    (features,) = [leaf for leaf in ops["leaves"] if leaf["shape"] == [64, 4]]
    leaves = safetensors_torch.load_file(tampered / "leaves.safetensors")
    leaves[features["key"]] = leaves[features["key"]] * 0  # every logit is the bias now
    safetensors_torch.save_file(leaves, tampered / "leaves.safetensors")
    _rewrite_checksum(tampered, "leaves.safetensors")
    done, report = _replayed(tampered, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert report["problems"] == []
    assert "The replayed step stayed finite: the problem did not reproduce" in done.stderr
    assert "different PyTorch build" in done.stderr


def test_an_edited_leaf_file_is_refused_by_its_checksum(dumped, tmp_path):
    _, _, dump = dumped
    edited = tmp_path / "edited"
    shutil.copytree(dump, edited)
    with open(edited / "leaves.safetensors", "r+b") as handle:
        handle.seek(-4, 2)
        last = handle.read(4)
        handle.seek(-4, 2)
        handle.write(bytes(255 - byte for byte in last))
    done, _ = _replayed(edited, tmp_path)
    assert done.returncode == 2
    assert "leaves.safetensors is corrupted" in done.stderr


def test_a_first_step_dump_replays_the_same_draws_and_names_the_weights(tmp_path):
    """A step-0 recording starts before the script seeds its generator and builds its
    model: the replay draws the batch and the dropout masks the step drew (the values at
    the log are the run's) and reads the weights as weights (a layer's output, not "the
    batch alone")."""
    script = "tests/scripts/torch/dropout_net_log_of_output.py"
    shutil.copy(ROOT / script, tmp_path / Path(script).name)
    dump = tmp_path / "dump"
    options = ("--dump", str(dump), "--confirm", "never")
    run = run_doctor(Path(script).name, tmp=tmp_path, options=options, cwd=tmp_path)
    assert run.exit_code == 1, run.stderr[-3000:]
    assert (run.problem["step"], run.problem["origin"]["op"]) == (0, "log")
    done, report = _replayed(dump, tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    again = report["problems"][0]
    assert again["origin"]["inputs"] == run.problem["origin"]["inputs"]
    assert again["explanation"] == run.problem["explanation"]
    assert "a layer's output" in again["explanation"]
    assert "Reproduced: the replay finds what the run found" in done.stderr
    assert "from other values" not in done.stderr


def _rewrite_checksum(dump: Path, name: str) -> None:
    from gradient_doctor.core.dump_folder import fingerprint, write_json

    manifest = json.loads((dump / "manifest.json").read_text())
    manifest["files"][name].update(fingerprint(dump / name))
    write_json(dump / "manifest.json", manifest)
