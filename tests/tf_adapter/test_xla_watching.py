"""Watching steps compiled with XLA whose batch shape is known only at run time (tf.data)."""

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import gradient_doctor  # noqa: E402


def _data(bad_row=None):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(64, 3)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5]], "float32")).astype("float32")
    if bad_row is not None:
        y[bad_row] = np.inf
    # An un-dropped remainder leaves the batch dimension unknown when the step is traced.
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)


def _fit(dataset, callbacks):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    history = model.fit(dataset, epochs=2, verbose=0, callbacks=callbacks)
    return model, history.history["loss"]


def test_healthy_xla_fit_on_a_dataset_is_unchanged():
    _, plain = _fit(_data(), [])
    doctor = gradient_doctor.Doctor(verbose=False)
    _, watched = _fit(_data(), [doctor])
    assert watched == plain
    assert doctor.report().status == "healthy"


def test_failing_xla_step_without_a_static_batch_shape_is_still_caught():
    doctor = gradient_doctor.Doctor(verbose=False)
    with pytest.warns(UserWarning, match="only a batch of static shape can be kept"):
        model, _ = _fit(_data(bad_row=20), [doctor])
    (finding,) = doctor.report().problems
    assert finding.step == 1
    assert finding.origin is None
    assert "could not be run again" in finding.explanation
    assert "did not reproduce" not in finding.explanation  # no replay ran: nothing to claim
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
