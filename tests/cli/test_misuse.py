"""Misuse gets a clear message and the right exit status, never a traceback from the doctor."""

import subprocess
import textwrap

import pytest

from tests.conftest import ROOT, doctor_command, run_doctor

pytestmark = pytest.mark.slow


def test_missing_script_is_a_usage_error(tmp_path):
    completed = subprocess.run(
        [*doctor_command(), "run", "no_such_train.py"], cwd=ROOT, capture_output=True, text=True
    )
    assert completed.returncode == 2
    assert "cannot run 'no_such_train.py': no such file" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_no_command_is_a_usage_error():
    completed = subprocess.run(doctor_command(), cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 2
    assert "usage: gradient-doctor" in completed.stderr


def _script(tmp_path, body: str):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_script_crash_is_reported_with_its_own_traceback(tmp_path):
    script = _script(
        tmp_path,
        """
        import sys
        def load(path):
            raise FileNotFoundError(f"missing data file {path}")
        print("argv", sys.argv[1:], __name__)
        load("data.csv")
        """,
    )
    run = run_doctor(script, "--epochs", "3", tmp=tmp_path)
    assert run.exit_code == 1
    assert "argv ['--epochs', '3'] __main__" in run.stdout
    assert "FileNotFoundError: missing data file data.csv" in run.stderr
    assert "line 4, in load" in run.stderr
    assert "gradient_doctor" not in run.stderr.split("Traceback")[1].split("FileNotFoundError")[0]
    assert run.report["status"] == "problem"
    assert run.report["problems"] == []
    assert run.report["script_error"] == "FileNotFoundError: missing data file data.csv"


def test_integer_variables_only_gives_the_frameworks_message(tmp_path):
    script = _script(
        tmp_path,
        """
        import tensorflow as tf
        import keras
        counter = tf.Variable(3)
        optimizer = keras.optimizers.SGD(0.1)
        with tf.GradientTape() as tape:
            loss = tf.cast(counter, tf.float32) * 2.0
        grads = tape.gradient(loss, [counter])
        optimizer.apply_gradients(zip(grads, [counter]))
        """,
    )
    run = run_doctor(script, tmp=tmp_path)
    assert run.exit_code == 1
    assert "ValueError" in run.report["script_error"]
    assert "gradient" in run.report["script_error"].lower()


def test_model_without_trainable_variables_is_said_clearly(tmp_path):
    script = _script(
        tmp_path,
        """
        import numpy as np
        import keras
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, trainable=False)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(np.ones((8, 3)), np.ones((8, 2)), epochs=1, verbose=0)
        """,
    )
    run = run_doctor(script, tmp=tmp_path)
    # Its fit trains nothing: a problem (was a warning and "healthy"), said clearly.
    assert run.exit_code == 1
    (problem,) = run.report["problems"]
    assert problem["category"] == "disconnected_gradients"
    assert "but none of its 2 weights is trainable" in problem["explanation"]
    assert problem["fixes"][0]["family"] == "unfreeze_model"


def test_scripts_own_doctor_passed_positionally_reports_to_the_run(tmp_path):
    script = _script(
        tmp_path,
        """
        import numpy as np
        import keras
        import gradient_doctor
        keras.utils.set_random_seed(0)
        x = np.random.randn(64, 3).astype("float32")
        y = np.random.randn(64, 1).astype("float32")
        y[20] = np.nan
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(x, y, 16, 2, 0, [gradient_doctor.Doctor()], shuffle=False)
        """,
    )
    run = run_doctor(script, tmp=tmp_path)
    assert run.exit_code == 1
    assert [(p["category"], p["step"]) for p in run.report["problems"]] == [("bad_input", 1)]


def test_a_negative_trial_step_count_is_refused_with_what_was_expected(tmp_path):
    from gradient_doctor.cli.main import main

    with pytest.raises(SystemExit) as stopped:
        main(["run", "--trial-steps", "-3", "train.py"])
    assert stopped.value.code == 2


def test_a_keras_backend_the_doctor_does_not_watch_is_refused_saying_which(tmp_path):
    script = tmp_path / "train.py"
    script.write_text('import os\nos.environ["KERAS_BACKEND"] = "jax"\nimport keras\n')
    done = subprocess.run(
        [*doctor_command(), "run", str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "runs Keras on its 'jax' backend (KERAS_BACKEND)" in done.stderr
    assert 'Set KERAS_BACKEND to "tensorflow"' in done.stderr


def test_a_script_that_is_not_python_is_a_usage_error_that_says_where(tmp_path):
    # A notebook exported as it was: its `!pip` line once ran the doctor's whole
    # set-up, then ended as "problem: the script raised an error", exit 1.
    exported = tmp_path / "train.py"
    exported.write_text("import torch\n!pip install torchvision\nx = torch.ones(2)\n")
    done = subprocess.run(
        [*doctor_command(), "run", str(exported)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "it is not valid Python at line 2: `!pip install torchvision`" in done.stderr
    assert "a notebook's shell or magic line" in done.stderr
    assert "Traceback" not in done.stderr
    notebook = tmp_path / "train.ipynb"
    notebook.write_text("{}")
    done = subprocess.run(
        [*doctor_command(), "fix", str(notebook)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "it is a Jupyter notebook" in done.stderr
    assert f"jupyter nbconvert --to script {notebook}" in done.stderr


def test_an_option_a_command_does_not_know_is_said_with_that_commands_usage(capsys):
    from gradient_doctor.cli.main import main

    with pytest.raises(SystemExit) as stopped:
        main(["run", "--no-such-option", "train.py"])
    said = capsys.readouterr().err
    assert stopped.value.code == 2
    assert "usage: gradient-doctor run [-h] [options] SCRIPT [ARGS ...]" in said
    assert "unrecognized arguments: --no-such-option" in said
    assert "the doctor's options go before SCRIPT" in said


def test_a_missing_script_is_said_alone_not_with_its_optional_arguments(capsys):
    from gradient_doctor.cli.main import main

    for command in ("run", "fix"):
        with pytest.raises(SystemExit) as stopped:
            main([command, "--trial-steps", "3"])
        said = capsys.readouterr().err
        assert stopped.value.code == 2
        assert said.rstrip().endswith("error: the following arguments are required: SCRIPT")
        assert f"usage: gradient-doctor {command} [-h] [options] SCRIPT [ARGS ...]" in said
