"""`run_script`'s `at_end`: called once the script ended its own way, while what it held is
alive: after an error, with the values of the user's frames the error unwound (innermost
first); after a clean end, with the script's globals; never when the doctor stopped it."""

import pytest

from gradient_doctor.cli.script_runner import run_script


@pytest.mark.parametrize(
    ("body", "error", "held", "outcome"),
    [
        (
            "def main():\n    inner = 'local'\n    raise ValueError('stop')\n"
            "outer = 'global'\nmain()\n",
            True,
            ["local", "global"],
            "ValueError",
        ),
        ("import sys\nmarker = 'global'\nsys.exit(3)\n", True, ["global"], "SystemExit"),
        ("import sys\nmarker = 'global'\nsys.exit(0)\n", False, ["global"], None),
        ("marker = 'global'\n", False, ["global"], None),
        (
            "def main():\n    inner = 'local'\nmain()\nmarker = 'global'\n",
            False,
            ["global"],
            None,
        ),  # a function's locals are gone after a clean end
    ],
)
def test_at_end_is_told_how_the_script_ended_and_what_it_held(tmp_path, body, error, held, outcome):
    script = tmp_path / "train.py"
    script.write_text(body)
    ends = []
    result = run_script(str(script), [], at_end=ends.append)
    (end,) = ends
    assert end.error is error
    assert [value for value in end.held if value in ("local", "global")] == held
    assert (result.error or "").startswith(outcome or "")


def test_at_end_is_not_called_when_the_doctor_stopped_the_script(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("import stopper\nstopper.stop()\n")
    (tmp_path / "stopper.py").write_text(
        "import types\n"
        "from gradient_doctor.errors import TrainingStopped\n"
        "def stop():\n"
        "    raise TrainingStopped(types.SimpleNamespace(origin=None, step=0, category='x'))\n"
    )
    ends = []
    assert run_script(str(script), [], at_end=ends.append).stopped
    assert ends == []


def test_a_failing_at_end_never_changes_the_scripts_outcome(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("raise KeyError('mine')\n")

    def broken(end):
        raise RuntimeError("the doctor's own")

    outcome = run_script(str(script), [], at_end=broken)
    assert outcome.error == "KeyError: 'mine'"
    assert "could not check how the script ended (RuntimeError" in capsys.readouterr().err
