"""The package's public names: the results importable without loading TensorFlow."""

import subprocess
import sys

import gradient_doctor


def test_every_public_name_resolves_and_is_listed():
    assert sorted(gradient_doctor.__all__) == [
        "Doctor",
        "DoctorError",
        "Finding",
        "Fix",
        "NotFix",
        "Origin",
        "Report",
        "SourceLine",
        "TrainingStopped",
        "UsageError",
        "ops",
        "watch",
    ]
    assert set(gradient_doctor.__all__) <= set(dir(gradient_doctor))


def test_reading_a_report_in_python_does_not_load_tensorflow():
    code = (
        "import sys, gradient_doctor as g; "
        "g.Finding, g.Fix, g.Origin, g.Report, g.__version__; "
        "print('tensorflow' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
