"""The bundled story examples, diagnosed through the real CLI and its JSON report."""

import pytest

from tests.conftest import line_of

pytestmark = pytest.mark.slow

STORY1 = "examples/story1_gnn_softmax_overflow.py"


def test_story1_softmax_overflow_is_named_at_the_hand_written_exp(doctor_run):
    run = doctor_run(STORY1)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert problem["category"] == "forward_overflow"
    assert problem["phase"] == "forward"
    origin = problem["origin"]
    assert origin["op"] == "Exp"
    assert origin["file"] == STORY1
    assert origin["line"] == line_of(STORY1, "w = tf.exp(scores)")
    assert origin["layer"].endswith("message_passing")
    assert origin["inputs"][0]["max"] > 88.72
    assert origin["outputs"][0]["inf"] > 0
    assert problem["step"] > 800
    assert run.report["steps_watched"] == problem["step"] + 1
    assert "gradient_clipping" in [n["remedy"] for n in problem["not_fixes"]]
    assert "stable_softmax" in [f["family"] for f in problem["fixes"]]
    assert "88.72" in problem["explanation"]


def test_story1_terminal_diagnosis_names_the_line_and_the_value(doctor_run):
    run = doctor_run(STORY1)
    assert "-> examples/story1_gnn_softmax_overflow.py:" in run.stderr
    assert "w = tf.exp(scores)" in run.stderr
    assert "Will not help" in run.stderr
