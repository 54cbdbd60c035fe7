"""`run --dump DIR` then `replay DIR`, through the real CLI: the replay names the run's origin."""

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, DoctorRun, doctor_command, line_of, run_doctor

pytestmark = pytest.mark.slow

FIT = "tests/scripts/dump_fit_exp_overflow.py"
LOOP = "tests/scripts/dump_loop_norm_zero.py"
STORY1 = "examples/story1_gnn_softmax_overflow.py"
STORY2 = "examples/story2_wgan_gp_norm.py"


@dataclass(frozen=True)
class Replayed:
    run: DoctorRun
    dump: Path
    exit_code: int
    report: dict | None
    stderr: str

    @property
    def problem(self) -> dict:
        assert self.report is not None and self.report["problems"], self.stderr[-3000:]
        return self.report["problems"][0]


def replay(dump: Path, report: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*doctor_command(), "replay", "--report", str(report), str(dump)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


_cache: dict[tuple, Replayed] = {}


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    """Run a script with `--dump`, then replay the dump (once per script and options)."""

    def get(script: str, *options: str) -> Replayed:
        key = (script, options)
        if key not in _cache:
            tmp = tmp_path_factory.mktemp(Path(script).stem)
            dump = tmp / "dump"
            run = run_doctor(script, tmp=tmp, options=("--dump", str(dump), *options))
            done = replay(dump, tmp / "replay.json")
            path = tmp / "replay.json"
            report = json.loads(path.read_text()) if path.exists() else None
            _cache[key] = Replayed(run, dump, done.returncode, report, done.stderr)
        return _cache[key]

    return get


def assert_same_origin(replayed: Replayed) -> None:
    ran, again = replayed.run.problem, replayed.problem
    assert replayed.run.exit_code == 1, replayed.run.stderr[-3000:]
    assert replayed.exit_code == 1, replayed.stderr[-3000:]
    for key in ("category", "step", "phase", "explanation"):
        assert again[key] == ran[key], key
    for key in ("op", "op_name", "layer", "file", "line", "code", "gradient_of", "inputs"):
        assert again["origin"][key] == ran["origin"][key], key
    assert "Reproduced: the replay finds what the run found" in replayed.stderr


def test_fit_forward_overflow_replays_to_the_same_exp(dumped):
    replayed = dumped(FIT, "--trial-steps", "0")
    assert_same_origin(replayed)
    origin = replayed.problem["origin"]
    assert (origin["op"], origin["gradient_of"]) == ("Exp", None)
    assert origin["line"] == line_of(FIT, "return tf.exp(scores)")
    assert replayed.problem["category"] == "forward_overflow"
    manifest = json.loads((replayed.dump / "manifest.json").read_text())
    assert manifest["finding"] == replayed.run.problem
    assert manifest["step"] == replayed.run.problem["step"]
    assert manifest["script"] == FIT


def test_custom_loop_backward_singularity_replays_to_the_same_sqrt_gradient(dumped):
    replayed = dumped(LOOP, "--trial-steps", "0")
    assert_same_origin(replayed)
    problem = replayed.problem
    assert problem["category"] == "backward_singularity"
    assert (problem["origin"]["op"], problem["origin"]["gradient_of"]) == ("SqrtGrad", "Sqrt")
    assert problem["origin"]["line"] == line_of(LOOP, "tf.norm(embed(batch), axis=-1)")
    assert "safe_norm" in [fix["family"] for fix in problem["fixes"]]


def test_story1_dump_replays_to_the_hand_written_exp(dumped):
    replayed = dumped(STORY1, "--trial-steps", "0")
    assert_same_origin(replayed)
    assert replayed.problem["origin"]["line"] == line_of(STORY1, "w = tf.exp(scores)")


def test_story2_dump_replays_to_the_norm_gradient(dumped):
    replayed = dumped(STORY2, "--trial-steps", "0")
    assert_same_origin(replayed)
    origin = replayed.problem["origin"]
    assert (origin["op"], origin["gradient_of"]) == ("SqrtGrad", "Sqrt")
    assert origin["line"] == line_of(STORY2, "norm = tf.norm(grads, axis=-1)")


def _tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_the_users_folder_is_unchanged_and_the_replay_needs_it_not_and_leaves_the_dump(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / LOOP, project / "train.py")
    (project / "notes.txt").write_text("the user's own file\n")
    before = _tree(project)
    dump = tmp_path / "dumps" / "first"
    # With the fix trials on: they run from the last good state first, and put it back.
    run = run_doctor(project / "train.py", tmp=tmp_path, options=("--dump", str(dump)), cwd=project)
    assert run.exit_code == 1, run.stderr[-3000:]
    assert [fix["verified"] for fix in run.problem["fixes"]] == [True]
    assert _tree(project) == before
    manifest = json.loads((dump / "manifest.json").read_text())
    assert manifest["finding"] == run.problem  # trial evidence and all
    assert sorted(p.name for p in (tmp_path / "dumps").iterdir()) == ["first"]  # no leftovers
    written = _tree(dump)
    shutil.rmtree(project)  # the replay needs neither the script nor its folder
    done = replay(dump, tmp_path / "replay.json")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Reproduced: the replay finds what the run found" in done.stderr
    assert _tree(dump) == written


def test_a_dump_folder_that_holds_files_is_refused_before_the_script_runs(tmp_path):
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine\n")
    run = run_doctor(LOOP, tmp=tmp_path, options=("--dump", str(occupied)))
    assert run.exit_code == 2
    assert "cannot write the crash dump" in run.stderr
    assert "never overwrites" in run.stderr
    assert "loss" not in run.stdout  # the script never ran
    assert [p.name for p in occupied.iterdir()] == ["keep.txt"]
    assert (occupied / "keep.txt").read_text() == "mine\n"


def test_a_healthy_run_writes_no_dump_and_says_so(tmp_path):
    dump = tmp_path / "dump"
    run = run_doctor(
        "tests/scripts/attention_mask_healthy.py", tmp=tmp_path, options=("--dump", str(dump))
    )
    assert run.exit_code == 0, run.stderr[-3000:]
    assert f"no crash dump written to {dump}: no step had non-finite values" in run.stderr
    assert not dump.exists()
