"""`run_script`'s `at_end`: called while a script that stopped on an error still holds its
frames, never after a clean end (a step skipped on purpose last is no one's error)."""

import pytest

from gradient_doctor.cli.script_runner import run_script


@pytest.mark.parametrize(
    ("body", "called", "error"),
    [
        ("def main():\n    held = [1]\n    raise ValueError('stop')\nmain()\n", True, "ValueError"),
        ("import sys\nsys.exit(3)\n", True, "SystemExit"),
        ("import sys\nsys.exit(0)\n", False, None),
        ("x = 1\n", False, None),
    ],
)
def test_at_end_runs_only_when_the_script_stopped_on_an_error(tmp_path, body, called, error):
    script = tmp_path / "train.py"
    script.write_text(body)
    seen = []
    outcome = run_script(str(script), [], at_end=lambda: seen.append("end"))
    assert seen == (["end"] if called else [])
    assert (outcome.error or "").startswith(error or "")


def test_a_failing_at_end_never_changes_the_scripts_outcome(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("raise KeyError('mine')\n")

    def broken():
        raise RuntimeError("the doctor's own")

    outcome = run_script(str(script), [], at_end=broken)
    assert outcome.error == "KeyError: 'mine'"
    assert "could not check how the script ended (RuntimeError" in capsys.readouterr().err
