"""Watching a healthy run must not change what training computes: bit-identical results."""

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import gradient_doctor  # noqa: E402


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 12)).astype("float32")
    y = (x[:, :1] * 2 - x[:, 1:2]).astype("float32")
    return x, y


def _model():
    return keras.Sequential(
        [
            keras.Input((12,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(1),
        ]
    )


def _fit(callbacks):
    keras.utils.set_random_seed(7)
    x, y = _data()
    model = _model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    history = model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=callbacks)
    assert set(history.history) == {"loss"}  # no statistic of the doctor's leaks into logs
    return history.history["loss"], [w.numpy() for w in model.weights]


def test_fit_with_doctor_is_bit_identical_to_plain_fit():
    plain_losses, plain_weights = _fit([])
    doctor = gradient_doctor.Doctor(verbose=False)
    watched_losses, watched_weights = _fit([doctor])
    assert watched_losses == plain_losses
    for plain, watched in zip(plain_weights, watched_weights, strict=True):
        np.testing.assert_array_equal(plain, watched)
    report = doctor.report()
    assert report.status == "healthy"
    assert report.steps_watched == 3 * 8


def _fit_compiled_twice(callbacks):
    """Fine-tuning: fit, freeze a layer, compile again with another optimizer, fit;
    `callbacks()` gives each fit's callbacks."""
    keras.utils.set_random_seed(3)
    x, y = _data()
    model = _model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    first = model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=callbacks())
    model.layers[0].trainable = False
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse", metrics=["mae"])
    second = model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=callbacks())
    return first.history, second.history, [w.numpy() for w in model.weights]


def test_a_model_compiled_again_is_guarded_again_and_its_logs_stay_its_own():
    # As `gradient-doctor run` watches it: one watcher for the run, its hooks kept on the
    # model between fits. Before: the second fit's logs (History, progress bar, a
    # CSVLogger's columns) held the doctor's `_gradient_doctor_stats`, from the train
    # function Keras built afresh after the second `compile`.
    from gradient_doctor.tf_adapter.watcher import make_watcher

    *plain, plain_weights = _fit_compiled_twice(list)
    watcher = make_watcher(verbose=False)
    watcher.install()  # each `fit` gets the run's Doctor
    try:
        *watched, watched_weights = _fit_compiled_twice(list)
    finally:
        watcher.uninstall()
    assert watched == plain
    assert set(watched[1]) == {"loss", "mae"}
    for before, after in zip(plain_weights, watched_weights, strict=True):
        np.testing.assert_array_equal(before, after)
    assert watcher.steps_watched == 2 * 2 * 8  # the second optimizer's updates too


def _fit_unknown_length(callbacks):
    """A fit over a filtered dataset (its length unknown: each epoch ends on a call whose
    batch never comes), per-batch losses kept."""
    keras.utils.set_random_seed(5)
    x, y = _data()
    data = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(32)
    model = _model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    losses = []
    batch_losses = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"]))
    )
    model.fit(data, epochs=3, verbose=0, callbacks=[batch_losses, *callbacks])
    return losses, int(model.optimizer.iterations.numpy()), [w.numpy() for w in model.weights]


def test_fit_over_a_dataset_of_unknown_length_is_bit_identical():
    # Keras counts an update on each epoch's last, batchless call (Keras 3.15: 27 after 24
    # updates):
    # Adam's bias correction reads the count, so from the second epoch on the updates
    # differed when the watched step did not count it too.
    plain_losses, plain_count, plain_weights = _fit_unknown_length([])
    doctor = gradient_doctor.Doctor(verbose=False)
    losses, count, weights = _fit_unknown_length([doctor])
    assert (losses, count) == (plain_losses, plain_count)
    for plain, watched in zip(plain_weights, weights, strict=True):
        np.testing.assert_array_equal(plain, watched)
    assert doctor.report().status == "healthy"


def _custom_loop(watched: bool, use_function: bool):
    keras.utils.set_random_seed(11)
    x, y = _data()
    model = _model()
    optimizer = keras.optimizers.Adam(1e-2)

    def step(batch_x, batch_y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch_x, training=True) - batch_y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    if use_function:
        step = tf.function(step)
    if watched:
        step = gradient_doctor.watch(step, optimizer=optimizer, verbose=False)
    losses = [float(step(x[i : i + 32], y[i : i + 32])) for i in range(0, 256, 32)]
    return losses, [w.numpy() for w in model.weights], step


@pytest.mark.parametrize("use_function", [True, False], ids=["tf.function", "eager"])
def test_custom_loop_watched_is_bit_identical(use_function):
    plain_losses, plain_weights, _ = _custom_loop(False, use_function)
    losses, weights, step = _custom_loop(True, use_function)
    assert losses == plain_losses
    for plain, watched in zip(plain_weights, weights, strict=True):
        np.testing.assert_array_equal(plain, watched)
    assert step.report().steps_watched == 8


def test_a_replay_traces_the_step_with_the_layers_trainable_as_the_compiled_step_had_them():
    # The classic DCGAN: the discriminator's step is built while it trains, then
    # `discriminator.trainable = False` for the combined model. Its compiled step still
    # trains it; a replay traced afresh trained nothing ("The model does not have any
    # trainable weights") and named no op.
    from gradient_doctor.tf_adapter.hooks.model_hooks import attach
    from gradient_doctor.tf_adapter.watcher import make_watcher

    keras.utils.set_random_seed(1)
    model = _model()
    model.compile(optimizer="sgd", loss="mse")
    hook = attach(model, make_watcher(verbose=False))
    trained = [v.path for v in model.trainable_variables]
    model.trainable = False
    seen = hook._as_compiled(lambda: [v.path for v in model.trainable_variables])()
    assert seen == trained and trained
    assert model.trainable is False and model.trainable_variables == []  # put back
    hook.detach()


def test_a_student_fitted_after_its_teacher_is_judged_afresh():
    # One run, two models: the teacher trained to a loss near 0, then a new student from
    # where a new model starts. Its first losses are no spike of the teacher's run.
    from gradient_doctor.tf_adapter.watcher import make_watcher

    keras.utils.set_random_seed(2)
    x, y = _data()
    watcher = make_watcher(verbose=False)
    teacher = _model()
    teacher.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    teacher.fit(
        x,
        y,
        batch_size=16,
        epochs=4,
        verbose=0,
        callbacks=[gradient_doctor.Doctor(watcher=watcher)],
    )
    student = keras.Sequential([keras.Input((12,)), keras.layers.Dense(1, bias_initializer="ones")])
    student.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
    student.fit(
        x,
        y * 30,
        batch_size=16,
        epochs=1,
        verbose=0,
        callbacks=[gradient_doctor.Doctor(watcher=watcher)],
    )
    assert watcher.steps_watched == 5 * 16
    assert "loss_spike" not in [w.category for w in watcher.warnings]
