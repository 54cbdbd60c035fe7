"""Where layers, models and optimizers were created: recorded at construction, else found
in the source, and nothing named when the source cannot tell two calls apart."""

from pathlib import Path

import pytest

keras = pytest.importorskip("keras")

import tensorflow as tf  # noqa: E402
from keras import layers  # noqa: E402

from gradient_doctor.core.source_frames import display_path  # noqa: E402
from gradient_doctor.tf_adapter.hooks.creation_sites import creation_line  # noqa: E402
from tests.conftest import creation_recording  # noqa: E402

recording = creation_recording


def _line(marker: str) -> int:
    """The number of the only line of this file that ends with the comment `marker`."""
    lines = Path(__file__).read_text().splitlines()
    found = [n for n, text in enumerate(lines, start=1) if text.rstrip().endswith(f"# {marker}")]
    assert len(found) == 1, found
    return found[0]


def test_a_layer_built_over_several_lines_is_recorded_with_its_first_and_last_line():
    with recording():
        layer = layers.Dense(  # dense-start
            3,
            activation="relu",
        )  # dense-end
    line = creation_line(layer)
    assert line is not None
    assert (line.file, line.line, line.end_line) == (
        display_path(__file__),
        _line("dense-start"),
        _line("dense-end"),
    )
    assert line.code == "layer = layers.Dense(  # dense-start"


class _Scaled(layers.Layer):
    def __init__(self, factor):
        super().__init__()  # super-init
        self.factor = factor

    def call(self, inputs):
        return inputs * self.factor


def test_a_users_layer_class_is_recorded_where_it_is_built_not_at_its_super_init():
    with recording():
        scaled = _Scaled(2.0)  # scaled-built
    assert creation_line(scaled).line == _line("scaled-built")
    assert creation_line(scaled).line != _line("super-init")


def test_optimizers_models_and_the_cells_keras_makes_are_recorded():
    with recording():
        optimizer = keras.optimizers.Adam(1e-3)  # optimizer-built
        recurrent = layers.LSTM(4)  # lstm-built
        model = keras.Sequential([keras.Input((5, 2)), recurrent])  # model-built
    assert creation_line(optimizer).line == _line("optimizer-built")
    assert creation_line(model).line == _line("model-built")
    # The LSTM made its cell in its own __init__: the cell shares the user's line.
    assert creation_line(recurrent.cell).line == _line("lstm-built")
    single = creation_line(recurrent)
    assert single.end_line is None and single.code.startswith("recurrent = layers.LSTM(4)")
    assert single.code[single.column : single.end_column] == "layers.LSTM(4)"


def test_a_layer_built_unwatched_is_found_by_the_one_call_whose_arguments_agree():
    probe = layers.Dense(7, name="probe_seven")  # probe-built
    other = layers.Dense(9, name="probe_nine")  # other-built
    assert creation_line(probe).line == _line("probe-built")
    assert creation_line(other).line == _line("other-built")
    optimizer = keras.optimizers.SGD(0.125)  # sgd-built
    assert creation_line(optimizer).line == _line("sgd-built")


def test_calls_that_agree_are_told_apart_by_the_name_that_keeps_the_layer():
    first = layers.Dense(11)  # first-eleven
    second = layers.Dense(11)  # second-eleven
    assert creation_line(first).line == _line("first-eleven")
    assert creation_line(second).line == _line("second-eleven")


def test_two_anonymous_calls_that_agree_name_nothing():
    pair = [layers.Dense(13), layers.Dense(13)]
    assert [creation_line(layer) for layer in pair] == [None, None]


def test_a_call_of_another_librarys_class_of_the_same_name_is_not_a_candidate(
    tmp_path, monkeypatch
):
    # A loaded user module builds its own `SGD` (as a PyTorch script's torch.optim.SGD
    # would): only the call that builds Keras's SGD can be where this optimizer was made.
    (tmp_path / "other_optimizers.py").write_text(
        "class SGD:\n    def __init__(self, params, lr=0.1):\n        self.lr = lr\n\n\n"
        "optimizer = SGD([0.0])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "other_optimizers", raising=False)
    __import__("other_optimizers")
    optimizer = keras.optimizers.SGD(0.375)  # keras-sgd-built
    line = creation_line(optimizer)
    assert line is not None and line.line == _line("keras-sgd-built")


class _Agent:
    """A trainer whose step is a `tf.function` method (an RL agent's, say)."""

    @tf.function
    def loss(self, x):
        doubled = x * 2.0
        return tf.math.log(doubled)  # the op the site must name


def test_an_op_of_a_traced_tf_function_method_run_eagerly_is_placed_at_its_own_line():
    # Once traced, the method's instance runs its AutoGraph-converted code even with
    # functions run eagerly (a replay): the op's frame is in a generated file.
    from gradient_doctor.tf_adapter.localize.replay import _instrumented, _Recorder

    agent = _Agent()
    agent.loss(tf.constant(1.0))  # traced
    recorder = _Recorder()
    with _instrumented(recorder):  # the replay's op callback, functions run eagerly
        agent.loss(tf.constant(1.0))
    (log,) = [event for event in recorder.events if event.op_type == "Log"]
    assert log.source_kind == "op"
    assert log.source.code == "return tf.math.log(doubled)  # the op the site must name"
    assert log.source.file.endswith("test_creation_sites.py")
    assert log.source.line == _line("the op the site must name")
