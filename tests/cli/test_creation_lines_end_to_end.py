"""End to end through the real CLI: an op Keras runs inside a library layer is placed
at the user's line that created that layer, and an overflowing update at its variable's."""

import pytest

from tests.conftest import line_of, run_doctor

pytestmark = pytest.mark.slow


def _origin(script: str, tmp_path) -> tuple[dict, dict]:
    """(problem, origin) of a `gradient-doctor run --trial-steps 0` of `script` (exit 1)."""
    run = run_doctor(script, tmp=tmp_path, options=("--trial-steps", "0"))
    assert run.exit_code == 1, run.stderr[-3000:]
    return run.problem, run.problem["origin"]


def test_an_overflow_in_a_sequential_dense_names_the_line_that_created_the_dense(tmp_path):
    script = "tests/scripts/dense_unscaled_input.py"
    problem, origin = _origin(script, tmp_path)
    assert (problem["category"], problem["step"], problem["phase"]) == (
        "forward_overflow",
        0,
        "forward",
    )
    assert (origin["op"], origin["layer"]) == ("MatMul", "sequential/dense")
    assert origin["source_kind"] == "layer_creation"
    assert origin["file"] == script
    assert origin["line"] == line_of(script, "layers.Dense(  # hidden")
    assert origin["end_line"] == line_of(script, "activation=") + 1  # the call's `),`
    assert origin["code"] == "layers.Dense(  # hidden"


def test_an_overflow_inside_an_rnn_cell_names_the_line_that_created_the_rnn(tmp_path):
    script = "tests/scripts/rnn_cell_recurrent_overflow.py"
    problem, origin = _origin(script, tmp_path)
    assert problem["category"] == "forward_overflow"
    assert origin["layer"] == "sequential/simple_rnn/simple_rnn_cell"
    assert origin["source_kind"] == "layer_creation"
    assert origin["line"] == line_of(script, "recurrent = keras.layers.SimpleRNN(")
    assert origin["end_line"] == origin["line"] + 2


def test_a_layer_of_a_subclassed_model_is_named_by_its_line_in_init(tmp_path):
    script = "tests/scripts/subclassed_dense_overflow.py"
    problem, origin = _origin(script, tmp_path)
    assert (problem["category"], origin["op"]) == ("forward_overflow", "MatMul")
    assert origin["layer"] == "regressor/dense"
    assert origin["source_kind"] == "layer_creation"
    assert origin["line"] == line_of(script, "self.hidden = layers.Dense(")
    assert origin["end_line"] is None


def test_an_overflowing_optimizer_square_names_variable_layer_and_creation_line(tmp_path):
    script = "tests/scripts/timestamp_features_adam.py"
    problem, origin = _origin(script, tmp_path)
    assert (problem["category"], problem["step"], problem["phase"]) == (
        "exploding_gradients",
        0,
        None,
    )
    assert origin["variable"] == "sequential/hidden/kernel"
    assert origin["layer"] == "sequential/hidden"
    assert origin["source_kind"] == "layer_creation"
    assert origin["line"] == line_of(script, 'layers.Dense(8, activation="relu", name="hidden")')
    assert origin["inputs"][0]["inf"] == 0 and origin["outputs"][0]["inf"] > 0
    assert "gradient of `sequential/hidden/kernel`" in problem["explanation"]
    assert f"created at {script}:{origin['line']}" in problem["explanation"]
