"""A run whose loss diverged with every value finite is a problem, through the real CLI:
dated to where the loss rose, the layer whose weights ran away named with its growth,
and the learning rate lowered on the optimizer's own line until a patched copy learned."""

import re

import pytest

from tests.conftest import line_of, run_doctor

pytestmark = pytest.mark.slow

KERAS_RNN = "tests/scripts/diverging_rnn_fit.py"
TORCH_RNN = "tests/scripts/torch/diverging_rnn.py"


def test_a_keras_rnn_diverging_at_a_high_rate_gets_the_rate_that_learned(doctor_run):
    run = doctor_run(KERAS_RNN)  # its patches rerun from the start (CONFIRMED_SCRIPTS)
    assert run.exit_code == 1
    problem = run.problem
    assert problem["category"] == "loss_diverged", problem["explanation"]
    assert 0 < problem["step"] < 20
    explanation = problem["explanation"]
    assert "`sequential/simple_rnn/simple_rnn_cell` grew from" in explanation, explanation
    assert "SGD at 1" in explanation, explanation
    assert problem["not_fixes"] == []  # SGD's update follows the gradient: clipping may help
    fix = problem["fixes"][0]
    assert (fix["family"], fix["verified"]) == ("lower_learning_rate", True), fix["evidence"]
    # 10x learned for two epochs, then diverged again: its copy's own loss did not fall.
    assert "tried after Lower the learning rate 10x" in fix["evidence"], fix["evidence"]
    assert "so it did not learn either" in fix["evidence"], fix["evidence"]
    assert "+    optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)," in fix["patch"]


def test_a_torch_rnn_diverging_at_a_high_rate_is_a_problem_at_the_optimizers_line(tmp_path):
    run = run_doctor(TORCH_RNN, tmp=tmp_path, options=("--trial-steps", "0"))
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert problem["category"] == "loss_diverged", problem["explanation"]
    # Which of the two grew most depends on the processor's float rounding (an AVX-512
    # machine and an AVX2 one part ways within the run): either is the run's story.
    assert re.search(r"the weights of `(head|rnn)` grew from", problem["explanation"])
    fix = problem["fixes"][0]
    assert fix["family"] == "lower_learning_rate"
    line = line_of(TORCH_RNN, "opt = torch.optim.SGD(")
    assert f"@@ -{line - 3}," in fix["patch"], fix["patch"]
    assert "+opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)" in fix["patch"]
