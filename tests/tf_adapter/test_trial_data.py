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
