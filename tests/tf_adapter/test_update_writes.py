"""Weights an optimizer's own update wrote non-finite: its slots read, its updates replayed."""

import importlib.util
import sys

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import gradient_doctor  # noqa: E402
from gradient_doctor.tf_adapter.localize.optimizer_state import slot_of  # noqa: E402


@pytest.fixture(autouse=True)
def float32_policy_after():
    """Each test sets its own policy; the rest of the session runs in float32."""
    yield
    keras.config.set_dtype_policy("float32")


def test_a_slot_is_matched_to_its_weight_by_the_longest_prefix():
    owners = {"dense_kernel_": "dense/kernel", "dense_1_kernel_": "dense_1/kernel"}
    assert slot_of("adam/dense_1_kernel_velocity", owners) == ("dense_1/kernel", "velocity")
    assert slot_of("adam/dense_kernel_momentum", owners) == ("dense/kernel", "momentum")
    assert slot_of("adam/iterations", owners) == (None, None)


def test_under_the_callback_the_last_update_is_named_and_the_replay_kept_apart(
    tmp_path, monkeypatch
):
    # A loaded module of the user's builds the same optimizer: the line is still this
    # file's, the one on the stack when `fit` ran.
    (tmp_path / "twin_setup.py").write_text(
        "import keras\n\ndef make():\n    return keras.optimizers.Adam(1e-3)\n"
    )
    spec = importlib.util.spec_from_file_location("twin_setup", tmp_path / "twin_setup.py")
    twin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(twin)
    monkeypatch.setitem(sys.modules, "twin_setup", twin)  # loaded for this test only
    # Another model's weight left NaN in the same process (a notebook, a test session) is
    # in the state saved before training: it must not stop the replay of this model's.
    stale = tf.Variable([np.nan, 1.0])
    keras.config.set_dtype_policy("float16")
    keras.utils.set_random_seed(1)
    rng = np.random.default_rng(1)
    x = rng.uniform(0.0, 255.0, size=(256, 16)).astype("float32")  # raw pixel values
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(16)]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    doctor = gradient_doctor.Doctor(verbose=False, trial_steps=0)
    model.fit(x, x, batch_size=32, epochs=1, shuffle=False, verbose=0, callbacks=[doctor])
    (finding,) = doctor.report().problems
    assert (finding.category, finding.step, finding.phase) == ("optimizer_overflow", 1, None)
    assert finding.broken_before
    # The callback is not handed fit's data: the replay ran on the failing batch, so it
    # tells how the state overflowed, not at which step of the run.
    assert "on the failing batch (2 times) (not the run's own batches" in finding.explanation
    assert "written by the optimizer's own update at step 1" in finding.explanation
    origin = finding.origin
    assert (origin.op, origin.source_kind) == ("ReadVariableOp", "optimizer_creation")
    assert "keras.optimizers.Adam(1e-3)" in origin.source.code  # found in this file
    assert 'Under the dtype policy "float16" (' in finding.explanation
    mixed = finding.fixes[0]
    assert mixed.family == "mixed_precision"
    assert '+    keras.config.set_dtype_policy("mixed_float16")' in mixed.patch
    assert not np.isfinite(stale.numpy()).all()
