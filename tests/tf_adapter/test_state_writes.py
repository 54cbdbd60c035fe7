"""The user's calls that leave NaN or Inf in a layer's state are remembered, with their line;
finite writes are not, and a later finite write forgets an earlier bad one."""

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from gradient_doctor.tf_adapter.hooks import state_writes  # noqa: E402
from gradient_doctor.tf_adapter.hooks.state_writes import write_of  # noqa: E402
from tests.conftest import patches_installed  # noqa: E402


@contextmanager
def recording():
    """The recording methods installed for the block, as `gradient-doctor run` does."""
    with patches_installed(state_writes.recording_patches()):
        yield


def _line(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    found = [n for n, text in enumerate(lines, start=1) if text.rstrip().endswith(f"# {marker}")]
    assert len(found) == 1, found
    return found[0]


def _model() -> keras.Model:
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])


def test_set_weights_with_nan_is_remembered_until_finite_weights_replace_it():
    model = _model()
    kernel, bias = model.get_weights()
    kernel[1, 1] = np.nan
    with recording():
        model.set_weights([kernel, bias])  # bad-set
        write = write_of(model.layers[0].kernel)
        assert (write.call, write.source.line) == ("set_weights", _line("bad-set"))
        assert write_of(model.layers[0].bias) is None  # the bias stayed finite
        model.set_weights([np.zeros_like(kernel), bias])
    assert write_of(model.layers[0].kernel) is None


def test_load_weights_from_a_checkpoint_with_nan_is_remembered(tmp_path):
    broken = _model()
    kernel, bias = broken.get_weights()
    kernel[0, 0] = np.inf
    broken.set_weights([kernel, bias])  # not recorded: outside the block
    path = str(tmp_path / "broken.weights.h5")
    broken.save_weights(path)
    fresh = _model()
    with recording():
        fresh.load_weights(path)  # bad-load
    write = write_of(fresh.layers[0].kernel)
    assert (write.call, write.source.line) == ("load_weights", _line("bad-load"))
    assert write_of(broken.layers[0].kernel) is None


def test_adapt_on_data_with_a_missing_value_is_remembered_and_on_clean_data_not():
    data = np.random.default_rng(0).normal(size=(20, 3)).astype("float32")
    clean, missing = keras.layers.Normalization(), keras.layers.Normalization()
    data_with_gap = data.copy()
    data_with_gap[4, 0] = np.nan
    with recording():
        clean.adapt(data)
        missing.adapt(data_with_gap)  # bad-adapt
    assert all(write_of(v) is None for v in clean.weights)
    mean = next(v for v in missing.weights if v.name == "mean")
    assert (write_of(mean).call, write_of(mean).source.line) == ("adapt", _line("bad-adapt"))


def test_a_hand_made_assign_counts_outside_a_step_and_not_in_a_traced_function():
    variable = tf.Variable([1.0, 2.0])
    weight = keras.Variable([1.0, 2.0])

    @tf.function
    def traced():
        variable.assign([np.nan, 0.0])

    with recording():
        traced()
        assert write_of(variable) is None  # traced: the value is not there to check
        weight.assign([np.nan, 0.0])  # bad-assign
        variable.assign([0.0, np.inf])  # bad-tf-assign
    assert (write_of(weight).call, write_of(weight).source.line) == ("assign", _line("bad-assign"))
    assert write_of(variable).source.line == _line("bad-tf-assign")
