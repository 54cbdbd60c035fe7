"""`--html`, `--tensorboard` and `--progress` through the real CLI, checked against what
the script itself printed at every step."""

import re
from pathlib import Path

import pytest

from tests.conftest import line_of, run_doctor

pytestmark = pytest.mark.slow

SCRIPT = "tests/scripts/exp_temperature_loop.py"
STEP_LINE = re.compile(r"^step (\d+) loss (\S+) largest (\S+)$")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html_tensorboard")
    options = ("--html", str(tmp / "report.html"), "--tensorboard", str(tmp / "tb"))
    doctor = run_doctor(SCRIPT, tmp=tmp, options=(*options, "--progress", "0.001"))
    return doctor, tmp


@pytest.fixture(scope="module")
def printed(run):
    """What the script printed: {step: (loss, largest score)}."""
    doctor, _ = run
    rows = [STEP_LINE.match(line) for line in doctor.stdout.splitlines()]
    assert all(rows), doctor.stdout[-2000:]
    return {int(m[1]): (float(m[2]), float(m[3])) for m in rows}


@pytest.fixture(scope="module")
def events(run):
    """The TensorBoard event files read back: {tag: (plugin, {step: value})}."""
    import tensorflow as tf

    _, tmp = run
    files = list((tmp / "tb").glob("events.out.tfevents.*"))
    assert len(files) == 1
    tags = {}
    for event in tf.compat.v1.train.summary_iterator(str(files[0])):
        for value in event.summary.value:
            plugin, points = tags.setdefault(
                value.tag, (value.metadata.plugin_data.plugin_name, {})
            )
            points[event.step] = tf.make_ndarray(value.tensor)
    return tags


def test_the_run_is_diagnosed_and_the_script_output_is_intact(run, printed):
    doctor, _ = run
    assert doctor.exit_code == 1, doctor.stderr[-3000:]
    problem = doctor.problem
    assert (problem["category"], problem["origin"]["op"]) == ("forward_overflow", "Exp")
    assert problem["origin"]["line"] == line_of(SCRIPT, "tf.exp(scores)")
    # every finite step printed its own line, in order, untouched by the progress line
    assert sorted(printed) == list(range(problem["step"]))
    assert doctor.report["warnings"], "the growing Exp input should be forecast"


def test_the_progress_line_is_whole_lines_on_stderr(run):
    doctor, _ = run
    lines = [line for line in doctor.stderr.splitlines() if "gradient-doctor progress:" in line]
    assert len(lines) >= 10
    assert all(line.startswith("gradient-doctor progress: step ") for line in lines)
    assert any("closest to a limit: Exp" in line and "of 88.72" in line for line in lines)
    assert "gradient-doctor progress" not in doctor.stdout


def test_tensorboard_scalars_are_the_values_training_computed(events, printed):
    plugin, losses = events["loss"]
    assert plugin == "scalars"
    assert sorted(losses) == sorted(printed)  # a short run: every step is kept
    for step, (loss, _) in printed.items():
        assert float(losses[step]) == pytest.approx(loss, rel=1e-6)
    _, headroom = events["headroom/Exp"]
    assert sorted(headroom) == [step for step in sorted(printed) if step % 10 == 0]
    for step, value in headroom.items():
        assert float(value) == pytest.approx(printed[step][1], rel=1e-6)
    _, limit = events["headroom/Exp_limit"]
    assert {round(float(v), 2) for v in limit.values()} == {88.72}
    _, norms = events["grad_norm/global"]
    assert len(norms) == len(printed) and all(float(v) > 0 for v in norms.values())


def test_tensorboard_text_holds_the_findings(events, run):
    doctor, _ = run
    step = doctor.problem["step"]
    plugin, problem = events["gradient_doctor/problem_1"]
    assert plugin == "text" and list(problem) == [step]
    text = problem[step].item().decode()
    assert f"forward_overflow at step {step}" in text
    assert f"{SCRIPT}:{line_of(SCRIPT, 'tf.exp(scores)')}" in text
    (warning,) = events["gradient_doctor/warning_1"][1].values()
    assert "limit expected at step" in warning.item().decode()
    (status,) = events["gradient_doctor/status"][1].values()
    assert status.item().decode().startswith("problem:")


def test_the_html_report_has_the_finding_and_the_plots(run):
    doctor, tmp = run
    page = Path(tmp / "report.html").read_text(encoding="utf-8")
    step = doctor.problem["step"]
    line = line_of(SCRIPT, "tf.exp(scores)")
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", page)
    assert captions[:2] == ["Loss", "Gradient norm"]
    assert f"Headroom: Exp ({SCRIPT}:{line})" in captions
    assert page.count("<svg") == len(captions)  # one plot per group of series
    assert f"forward_overflow at step {step}" in page
    assert "limit 88.72" in page and 'data-series="headroom/Exp"' in page
    assert "limit forecast at step" in page


CRASHING = """
import keras
import numpy as np

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
x = np.random.default_rng(0).normal(size=(48, 3)).astype("float32")
model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0)
raise RuntimeError("the data loader died")
"""


def test_a_script_that_crashes_still_gets_its_html_and_tensorboard(tmp_path):
    import tensorflow as tf

    script = tmp_path / "crashing.py"
    script.write_text(CRASHING)
    options = ("--html", str(tmp_path / "r.html"), "--tensorboard", str(tmp_path / "tb"))
    doctor = run_doctor(script, tmp=tmp_path, options=options)
    assert doctor.exit_code == 1
    assert doctor.report["script_error"] == "RuntimeError: the data loader died"
    assert doctor.report["steps_watched"] == 12
    (events,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    loss_steps, status = [], None
    for event in tf.compat.v1.train.summary_iterator(str(events)):
        for value in event.summary.value:
            if value.tag == "loss":
                loss_steps.append(event.step)
            if value.tag == "gradient_doctor/status":
                status = tf.make_ndarray(value.tensor).item().decode()
    assert loss_steps == list(range(12))
    assert "the script raised: RuntimeError: the data loader died" in status
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "RuntimeError: the data loader died" in page
    assert "<figcaption>Loss</figcaption>" in page
