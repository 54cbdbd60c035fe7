"""Report files: each written on its own, failures said clearly, bad paths refused early."""

import json
from pathlib import Path

import pytest

from gradient_doctor.cli.main import main
from gradient_doctor.cli.report_outputs import write_outputs
from gradient_doctor.core.report import Report

REPORT = Report(script="train.py", steps_watched=3)


def test_every_requested_output_is_written(tmp_path):
    json_path, html_path = tmp_path / "r.json", tmp_path / "html" / "r.html"
    assert write_outputs(REPORT, str(json_path), str(html_path)) is True
    assert json.loads(json_path.read_text())["status"] == "healthy"
    assert "<!DOCTYPE html>" in html_path.read_text()


def test_an_output_that_fails_is_said_and_the_others_are_written(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    json_path = tmp_path / "r.json"
    assert write_outputs(REPORT, str(json_path), str(blocker / "r.html")) is False
    error = capsys.readouterr().err
    assert "could not write the HTML report to" in error and "a_file/r.html" in error
    assert "Check that the path is writable" in error
    assert json_path.exists()


def test_output_paths_that_cannot_work_are_usage_errors_before_the_run(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    assert main(["run", "--html", str(tmp_path), str(script)]) == 2
    assert "`--html` must name a file" in capsys.readouterr().err
    assert main(["run", "--tensorboard", str(script), str(script)]) == 2
    assert "`--tensorboard` must name a folder" in capsys.readouterr().err


@pytest.mark.parametrize("seconds", ["-1", "soon", "inf"])
def test_progress_takes_seconds_of_zero_or_more(seconds, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--progress", seconds, str(tmp_path / "train.py")])
    assert exit_.value.code == 2
    assert "expected a number of seconds >= 0" in capsys.readouterr().err


def test_help_documents_the_new_options(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--html PATH" in text and "--tensorboard DIR" in text
    assert "--progress SECONDS" in text and "default 30; 0 turns it off" in text


def test_an_output_path_under_a_file_or_where_nothing_can_be_written_is_refused_first(
    tmp_path, capsys
):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    assert main(["run", "--report", str(script / "r.json"), str(script)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    # Under /proc nothing can be made, whoever runs (os.access says yes to root).
    if (Path("/proc") / "self").exists():
        assert main(["run", "--html", "/proc/gradient-doctor/r.html", str(script)]) == 2
        assert "nothing can be written in '/proc'" in capsys.readouterr().err
    # A folder still to be made, under one that can be written: accepted, the script runs.
    assert main(["run", "--report", str(tmp_path / "new" / "r.json"), str(script)]) == 1
