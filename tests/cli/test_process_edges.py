"""The edges of a process: signals, outputs that must not overwrite, --version, python -m,
no TensorFlow, the script's own exit status, and tracebacks without the doctor's frames."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gradient_doctor.core.report import Report
from gradient_doctor.render.json_report import report_to_dict
from gradient_doctor.render.text import header_line
from tests.conftest import ROOT, SCRIPTS, doctor_command, line_of, run_doctor

slow = pytest.mark.slow
LOOP = "tests/scripts/loop_until_signal.py"
FIT = "tests/scripts/fit_until_signal.py"
HINGE = "tests/scripts/hinge_distance_zero_rows.py"
RAISE = "tests/scripts/raise_in_function.py"
EXIT = "tests/scripts/exit_with_status.py"


class LiveRun:
    """A `gradient-doctor run` in the background, its stdout and stderr read as they come."""

    def __init__(self, script: str, *options: str) -> None:
        self.process = subprocess.Popen(
            [*doctor_command(), "run", "--confirm", "never", *options, script],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._drain, args=(stream, lines), daemon=True)
            for stream, lines in ((self.process.stdout, self.out), (self.process.stderr, self.err))
        ]
        for reader in self._readers:
            reader.start()

    def _drain(self, stream, lines: list[str]) -> None:
        for line in stream:
            with self._changed:
                lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, lines: list[str], text: str, timeout: float = 120) -> None:
        """Block until a line holding `text` was printed (fail if the run ends first)."""

        def seen() -> bool:
            return any(text in line for line in lines) or self.process.poll() is not None

        with self._changed:
            self._changed.wait_for(seen, timeout)
        assert any(text in line for line in lines), f"never printed {text!r}:\n{self.stderr}"

    def stop(self, signum: int, timeout: float = 120) -> int:
        """Send `signum`, wait for the doctor to end, and return its exit status."""
        self.process.send_signal(signum)
        code = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(timeout)
        return code

    @property
    def stderr(self) -> str:
        return "".join(self.err)


def traceback_frames(stderr: str) -> str:
    """The frame lines of the first traceback on stderr."""
    block = stderr.split("Traceback (most recent call last):", 1)[1]
    return "\n".join(line for line in block.splitlines() if line.startswith("  File "))


def shows_doctor_frames(frames: str) -> bool:
    """Whether frame lines name a module of the doctor's (from its source or installed)."""
    return any(place in frames for place in ("src/gradient_doctor/", "packages/gradient_doctor/"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the report model: status, summary line, JSON ---------------------------------------


def test_interrupted_status_summary_and_json():
    report = Report(script="train.py", steps_watched=37, interrupted="SIGTERM")
    assert report.status == "interrupted"
    assert header_line(report) == (
        "interrupted by SIGTERM: train.py, 37 steps watched, nothing found before the signal"
    )
    data = report_to_dict(report)
    assert data["status"] == "interrupted" and data["interrupted"] == "SIGTERM"
    assert "interrupted" not in report_to_dict(Report(script="train.py", steps_watched=3))


def test_a_problem_found_before_the_signal_stays_a_problem(make_problem):
    report = Report(script="t.py", steps_watched=4, problems=(make_problem,), interrupted="SIGINT")
    assert report.status == "problem"
    assert header_line(report).endswith("1 problem, interrupted by SIGINT")


@pytest.fixture
def make_problem():
    from gradient_doctor.core.findings import Finding

    return Finding(category="bad_input", step=1, phase=None, origin=None, explanation="x")


# --- signals ---------------------------------------------------------------------------


@slow
def test_a_signal_during_the_reruns_starts_no_more_and_keeps_the_runs_report(tmp_path):
    # Before, SIGINT while the fixes were rerun said "writing the reports first" and then
    # ran every remaining rerun (45 s), judging fixes by the one the signal had cut short;
    # then every rerun's verdict was dropped, the finished one's too.
    name = "counts_outlier_batch.py"
    (tmp_path / name).write_text((SCRIPTS / "torch" / name).read_text())
    process = subprocess.Popen(
        [*doctor_command(), "run", "--confirm", "always", "--report", "r.json", name],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    err = []
    for line in process.stderr:
        err.append(line)
        if "running a patched copy of your folder" in line:
            process.send_signal(signal.SIGINT)
            break
    err.extend(process.stderr)
    assert process.wait(300) == 130, "".join(err)[-3000:]
    stderr = "".join(err)
    assert stderr.count("running a patched copy of your folder") == 1, stderr[-3000:]
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["interrupted"] == "SIGINT"
    problem = data["problems"][0]
    assert problem["category"] == "forward_overflow"
    # The rerun under way when the signal came ran to its end (the signal went to the
    # doctor alone): its verdict stands; every other fix stands as the run judged it.
    judged = [fix for fix in problem["fixes"] if "patched copy" in (fix["evidence"] or "")]
    assert len(judged) == 1, [fix["evidence"] for fix in problem["fixes"]]
    assert all("stopped by the signal" not in (fix["evidence"] or "") for fix in judged)


@slow
def test_sigterm_mid_run_writes_every_report_and_exits_143(tmp_path):
    report, html, board = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "board"
    run = LiveRun(LOOP, "--report", str(report), "--html", str(html), "--tensorboard", str(board))
    run.wait_for(run.out, "training")
    run.wait_for(run.out, "step 5 ")
    assert run.stop(signal.SIGTERM) == 143, run.stderr
    data = json.loads(report.read_text())
    assert data["status"] == "interrupted" and data["interrupted"] == "SIGTERM"
    assert data["problems"] == [] and "script_error" not in data
    printed = sum(line.startswith("step ") for line in run.out)
    assert printed >= 6 and printed <= data["steps_watched"] <= printed + 1
    assert 'class="status status-interrupted"' in html.read_text()
    assert any(name.startswith("events.out.tfevents.") for name in os.listdir(board))
    summary = " ".join(run.stderr.split())
    assert "gradient-doctor interrupted by SIGTERM: tests/scripts/loop_until_signal.py" in summary
    assert "the script was stopped by SIGTERM at tests/scripts/loop_until_signal.py:" in summary


@slow
def test_sigint_during_fit_shows_the_keyboard_interrupt_and_exits_130(tmp_path):
    report = tmp_path / "r.json"
    run = LiveRun(FIT, "--report", str(report))
    run.wait_for(run.out, "batch 3")
    assert run.stop(signal.SIGINT) == 130, run.stderr
    data = json.loads(report.read_text())
    assert data["status"] == "interrupted" and data["interrupted"] == "SIGINT"
    # The doctor's callback runs after the script's: the batch printed last may not be
    # counted yet when the signal lands between the two.
    assert data["steps_watched"] >= 3
    assert "\nKeyboardInterrupt\n" in run.stderr
    frames = traceback_frames(run.stderr)
    assert f'fit_until_signal.py", line {line_of(FIT, "model.fit(")}, in main' in frames
    assert "runpy" not in frames and not shows_doctor_frames(frames)
    assert "gradient-doctor interrupted by SIGINT" in " ".join(run.stderr.split())


@slow
def test_a_signal_during_the_diagnosis_waits_for_it_and_keeps_the_problem(tmp_path):
    # The trials of 2000 steps take seconds: the signal lands in the doctor's own code.
    report = tmp_path / "r.json"
    run = LiveRun(HINGE, "--report", str(report), "--trial-steps", "2000")
    run.wait_for(run.err, "trying 3 remedies, each from a saved good state")
    assert run.stop(signal.SIGTERM) == 143, run.stderr
    assert "SIGTERM received while the doctor diagnoses a step" in " ".join(run.stderr.split())
    data = json.loads(report.read_text())
    assert data["status"] == "problem" and data["interrupted"] == "SIGTERM"
    problem = data["problems"][0]
    assert (problem["category"], problem["origin"]["op"], problem["step"]) == (
        "backward_singularity",
        "SqrtGrad",
        3,
    )
    assert problem["origin"]["line"] == line_of(HINGE, "distance = tf.sqrt(")
    assert any(fix["verified"] for fix in problem["fixes"])  # the trials ran to the end
    # Every count is of the tensor it names: the Sqrt output's 4 zeros, not the
    # incoming gradient's (rows past the margin).
    sqrt_output, incoming = problem["origin"]["inputs"]
    assert sqrt_output["zeros"] == 4 and incoming["zeros"] != 4
    assert "4 values sat exactly on that point" in problem["explanation"]


# --- outputs that would destroy a file ----------------------------------------------------


def _refused(tmp_path: Path, flag: str, target: Path, script: Path) -> str:
    before = digest(target) if target.is_file() else None
    completed = subprocess.run(
        [*doctor_command(), "run", flag, str(target), str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2, completed.stderr
    if before is not None:
        assert digest(target) == before
    assert "Traceback" not in completed.stderr
    assert "the script must not run" not in completed.stdout
    return " ".join(completed.stderr.split())


@slow
def test_reports_never_overwrite_the_script_its_sources_or_other_files(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('the script must not run')\n")
    (tmp_path / "model.py").write_text("WIDTH = 8\n")
    (tmp_path / "notes.html").write_text("<p>my notes</p>\n")
    (tmp_path / "data.json").write_text('{"rows": [1, 2, 3]}\n')

    error = _refused(tmp_path, "--report", script, script)
    assert f"cannot write the JSON report to '{script}': it is the script being run" in error
    assert f"Pass another path, for example `--report {tmp_path / 'train_report.json'}`" in error
    error = _refused(tmp_path, "--html", tmp_path / "model.py", script)
    assert "it is a source file, and its code would be lost" in error
    error = _refused(tmp_path, "--html", tmp_path / "notes.html", script)
    assert "is not a report gradient-doctor wrote, so its contents would be lost" in error
    assert f"`--html {tmp_path / 'train_report.html'}`" in error
    error = _refused(tmp_path, "--report", tmp_path / "data.json", script)
    assert "is not a report gradient-doctor wrote" in error
    error = _refused(tmp_path, "--tensorboard", tmp_path, script)
    assert "holds files that are not TensorBoard event files" in error
    assert f"`--tensorboard {tmp_path / 'gradient_doctor'}`" in error


@slow
def test_the_script_passed_by_another_spelling_is_still_refused(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('the script must not run')\n")
    link = tmp_path / "latest.json"
    link.symlink_to(script)
    assert "it is the script being run" in _refused(tmp_path, "--report", link, script)


def test_replay_report_never_overwrites_a_file_the_doctor_did_not_write(tmp_path, capsys):
    from gradient_doctor.cli.main import main

    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "results"}\n')
    before = digest(notes)
    assert main(["replay", "--report", str(notes), str(tmp_path / "dump")]) == 2
    assert "is not a report gradient-doctor wrote" in capsys.readouterr().err
    assert digest(notes) == before


# --- the script's own exit status (reruns into the same report paths) -------------------


def _outputs(tmp_path: Path) -> tuple[str, ...]:
    html, board = str(tmp_path / "r.html"), str(tmp_path / "board")
    return ("--html", html, "--tensorboard", board, "--trial-steps", "0")


@slow
def test_the_scripts_own_exit_status_passes_through(tmp_path):
    three = run_doctor(EXIT, "3", tmp=tmp_path, options=_outputs(tmp_path))
    assert three.exit_code == 3, three.stderr[-3000:]
    assert three.report["script_error"] == "SystemExit: 3"
    assert three.report["steps_watched"] == 4
    # A rerun into the same paths replaces the doctor's own reports.
    message = run_doctor(EXIT, "no data left", tmp=tmp_path, options=_outputs(tmp_path))
    assert message.exit_code == 1
    assert "no data left" in message.stderr.splitlines()
    assert message.report["script_error"] == "SystemExit: no data left"
    assert len(os.listdir(tmp_path / "board")) == 2


@slow
def test_exit_zero_is_healthy_unless_a_problem_was_diagnosed(tmp_path):
    healthy = run_doctor(EXIT, "0", tmp=tmp_path, options=_outputs(tmp_path))
    assert healthy.exit_code == 0, healthy.stderr[-3000:]
    assert healthy.report["status"] == "healthy"
    options = ("--keep-going", *_outputs(tmp_path))
    found = run_doctor(EXIT, "0", "--nan-batch", tmp=tmp_path, options=options)
    assert found.exit_code == 1, found.stderr[-3000:]
    assert found.report["problems"][0]["category"] == "bad_input"
    assert "script_error" not in found.report
    assert 'class="status status-problem"' in (tmp_path / "r.html").read_text()


# --- tracebacks --------------------------------------------------------------------------


@slow
def test_tracebacks_show_the_scripts_frames_only(tmp_path):
    run = run_doctor(RAISE, tmp=tmp_path)
    assert run.exit_code == 1
    frames = traceback_frames(run.stderr)
    assert f'raise_in_function.py", line {line_of(RAISE, "rows = load_rows(")}, in <module>' in (
        frames
    )
    assert f"line {line_of(RAISE, 'return [parse(line)')}, in load_rows" in frames
    assert f"line {line_of(RAISE, 'return [float(field)')}, in parse" in frames
    assert "runpy" not in frames and "frozen" not in frames and not shows_doctor_frames(frames)
    assert "ValueError: could not convert string to float: 'three'" in run.stderr
    assert run.report["script_error"] == "ValueError: could not convert string to float: 'three'"


def test_a_script_that_moves_its_working_directory_moves_no_report(tmp_path):
    # The script reads its data through `__file__` and then `os.chdir`s into outputs/,
    # where a file of the user's has the report's name: it must stay as it was, and the
    # report, the patch's paths and `__file__` are those of `python train.py`.
    name = "chdir_into_outputs.py"
    folder = tmp_path / "project"
    (folder / "outputs").mkdir(parents=True)
    (folder / name).write_text((ROOT / SCRIPTS / "torch" / name).read_text())
    (folder / "counts.txt").write_text("1\n1\n1\n")
    mine = folder / "outputs" / "report.json"
    mine.write_text('{"mine": true}')
    completed = subprocess.run(
        [*doctor_command(), "run", "--confirm", "never", "--report", "report.json", name],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 1, completed.stderr[-3000:]
    assert mine.read_text() == '{"mine": true}'
    report = json.loads((folder / "report.json").read_text())
    problem = report["problems"][0]
    assert problem["origin"]["file"] == name
    assert problem["origin"]["line"] == line_of(
        f"{SCRIPTS}/torch/{name}", "loss = torch.log(rate * counts.mean()).sum()"
    )
    patched = [fix for fix in problem["fixes"] if fix.get("patch")]
    assert patched and all(f"--- a/{name}" in fix["patch"] for fix in patched)


# --- --version, python -m, and what loads TensorFlow ---------------------------------------

NO_TENSORFLOW_CHECK = """
import contextlib, io, sys
from gradient_doctor.cli.main import main
for argv in (["--version"], ["--help"], ["run", "--help"], ["replay", "--help"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(argv)
print(sorted(name for name in ("tensorflow", "keras") if name in sys.modules))
"""


def test_help_and_version_do_not_load_tensorflow():
    completed = subprocess.run(
        [sys.executable, "-c", NO_TENSORFLOW_CHECK], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"


def test_version_comes_from_the_package_metadata_and_python_m_runs_the_cli():
    from importlib.metadata import version

    for command in (doctor_command(), [sys.executable, "-m", "gradient_doctor"]):
        completed = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, timeout=60
        )
        assert completed.returncode == 0
        assert completed.stdout.strip() == f"gradient-doctor {version('gradient-doctor')}"
    usage = subprocess.run(
        [sys.executable, "-m", "gradient_doctor", "run"], capture_output=True, text=True
    )
    assert usage.returncode == 2 and "usage: gradient-doctor run" in usage.stderr


def test_help_documents_every_exit_status():
    completed = subprocess.run(
        [*doctor_command(), "run", "--help"], capture_output=True, text=True, timeout=60
    )
    text = " ".join(completed.stdout.split())
    assert "N the script's own sys.exit(N) with N not 0" in text
    assert "128+S the run was stopped by signal S (130 SIGINT, 143 SIGTERM)" in text


# --- without TensorFlow -------------------------------------------------------------------

# What `pip install gradient-doctor` brings (keras, numpy, rich and theirs), not TensorFlow.
LIGHT_PACKAGES = (
    "numpy",
    "rich",
    "markdown_it",
    "mdurl",
    "pygments",
    "keras",
    "absl",
    "h5py",
    "ml_dtypes",
    "namex",
    "optree",
    "packaging",
)


@slow
def test_without_tensorflow_run_and_replay_say_how_to_install_it(tmp_path):
    # A real venv with no TensorFlow (made in a second, offline): the doctor's source and
    # the light dependencies are put on its path; installing them with pip would need
    # the network and take minutes.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    here = Path(next(p for p in sys.path if p.endswith("site-packages")))
    light = tmp_path / "light"
    light.mkdir()
    for name in LIGHT_PACKAGES:
        for found in (here / name, here / f"{name}.libs"):
            if found.exists():
                (light / found.name).symlink_to(found)
    (site / "gradient_doctor_source.pth").write_text(f"{ROOT / 'src'}\n{light}\n")
    probe = subprocess.run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('tensorflow'))"],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "None", probe.stderr

    script = SCRIPTS / "loop_until_signal.py"
    dump = tmp_path / "dump"  # a TensorFlow dump's manifest (one names no framework)
    dump.mkdir()
    (dump / "manifest.json").write_text('{"format": "gradient-doctor/dump", "version": 1}')
    for argv in (["run", str(script)], ["replay", str(dump)]):
        completed = subprocess.run(
            [python, "-m", "gradient_doctor", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert completed.returncode == 2, completed.stderr
        lines = completed.stderr.strip().splitlines()
        assert len(lines) == 1, completed.stderr
        assert lines[0].startswith("gradient-doctor: error: TensorFlow is not installed")
        assert 'pip install "gradient-doctor[tensorflow]"' in lines[0]
    version = subprocess.run(
        [python, "-m", "gradient_doctor", "--version"], capture_output=True, text=True
    )
    assert version.returncode == 0 and version.stdout.startswith("gradient-doctor ")
