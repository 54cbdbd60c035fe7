"""Fix trials read `fit`'s data again only when that cannot disturb the user's own iterators."""

import numpy as np
import tensorflow as tf

from gradient_doctor.tf_adapter.trials.trial_data import FitCall, fit_batches


def test_arrays_are_batched_as_fit_would_batch_them():
    x = np.arange(20, dtype="float32").reshape(10, 2)
    y = np.arange(10, dtype="float32")
    batches = list(fit_batches(x, y, batch_size=4)())
    assert [tuple(b[0].shape) for b in batches] == [(4, 2), (4, 2), (2, 2)]
    np.testing.assert_array_equal(batches[0][1].numpy(), y[:4])


def test_a_dataset_is_read_again_from_its_start_each_time():
    dataset = tf.data.Dataset.range(5).batch(2)
    make = fit_batches(dataset)
    first = [b.numpy().tolist() for b in make()]
    again = [b.numpy().tolist() for b in make()]
    assert first == again == [[0, 1], [2, 3], [4]]


def test_a_python_generator_is_never_read():
    consumed = []

    def generator():
        while True:
            consumed.append(1)
            yield np.zeros((2, 2), "float32"), np.zeros((2,), "float32")

    assert fit_batches(generator()) is None
    assert consumed == []


def test_features_near_float32s_limit_are_standardised_without_overflow():
    # Their float32 mean and squared deviations would overflow; the statistics are taken
    # in float64 (as the patch writes them) and the batches come back in Keras's floatx.
    readings = np.random.default_rng(0).uniform(1.0, 3.0, size=(64, 4)) * 1e38
    call = FitCall(source=None, x=readings.astype("float32"), y=np.zeros(64, "float32"))
    (features, _), *_ = list(call.standardised_batches(1e-7)())
    assert features.dtype == tf.float32
    assert np.all(np.isfinite(features.numpy()))
    assert np.abs(features.numpy()).max() < 3.0


def test_the_fit_line_is_a_site_for_standardising_only_when_x_is_an_array_of_floats():
    # `model.fit(train_ds)` was rewritten `(train_ds - train_ds.mean(axis=0, ...)) / ...`,
    # a patch that crashes: a Dataset has no mean.
    from gradient_doctor.core.evidence import Evidence
    from gradient_doctor.core.findings import SourceLine
    from gradient_doctor.tf_adapter.trials.fix_sites import fix_sites

    line = SourceLine("train.py", 9, "model.fit(train_ds, epochs=3)")
    evidence = Evidence(step=3, phase="forward", origin=None)
    dataset = FitCall(source=line, x=tf.data.Dataset.range(4).batch(2))
    assert fix_sites(None, evidence, dataset).fit is None
    arrays = FitCall(source=line, x=np.zeros((4, 2), "float32"))
    assert fix_sites(None, evidence, arrays).fit == line
    assert not FitCall(source=line, x=np.zeros((4, 2), "int64")).standardisable()


def test_the_targets_are_standardised_as_the_patch_writes_them_and_the_features_kept():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(10, 3)).astype("float32")
    prices = rng.uniform(1e5, 6e5, size=10).astype("float32")
    call = FitCall(source=None, x=x, y=prices, batch_size=10)
    assert call.standardisable("y")
    ((features, targets),) = list(call.standardised_batches(1e-7, "y")())
    np.testing.assert_array_equal(features.numpy(), x)
    wide = "float64"
    expected = (prices - prices.mean(axis=0, dtype=wide)) / (prices.std(axis=0, dtype=wide) + 1e-7)
    np.testing.assert_allclose(targets.numpy(), expected, rtol=1e-6)
    assert not FitCall(source=None, x=x, y=np.zeros(10, "int64")).standardisable("y")


def test_an_autoencoders_batches_have_inputs_and_targets_standardised_alike():
    pixels = np.random.default_rng(1).uniform(0.0, 255.0, size=(8, 3)).astype("float32")
    call = FitCall(source=None, x=pixels, y=pixels, batch_size=8)
    ((features, targets),) = list(call.standardised_batches(1e-7)())
    np.testing.assert_array_equal(features.numpy(), targets.numpy())
    assert np.abs(features.numpy()).max() < 3.0


def test_the_targets_of_a_batch_are_its_labels_or_a_custom_steps_last_floating_input():
    from gradient_doctor.tf_adapter.localize.input_scan import keras_batch_names, target_scale

    features = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    prices = tf.constant([[250_000.5], [410_000.0]])
    scale = target_scale(keras_batch_names((features, prices)))
    assert (scale.tensor, scale.largest, scale.mean) == ("`y`", 410_000.0, 330_000.25)
    # A custom step `train_step(x, y)`: its arguments' own names.
    assert target_scale([("x", features), ("y_batch", prices)]).tensor == "`y_batch`"
    # Class ids stored as floats are not regression targets; integer labels are not
    # floating; a single input has no targets to tell apart from it.
    ids = tf.constant([3.0, 7.0])
    assert target_scale(keras_batch_names((features, ids))) is None
    assert target_scale(keras_batch_names((features, tf.constant([3, 7])))) is None
    assert target_scale([("images", features)]) is None
