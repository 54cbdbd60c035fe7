"""The guard skips the first non-finite update, keeps the last good weights, and says why."""

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import gradient_doctor  # noqa: E402
from gradient_doctor.errors import TrainingStopped  # noqa: E402


def _loop(stop_on_problem):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(0.1)

    @tf.function
    def train_step(x, scale):
        with tf.GradientTape() as tape:
            logits = model(x) * scale
            weights = tf.exp(logits)  # overflows once `scale` is large
            loss = tf.reduce_mean(weights[:, 0] / tf.reduce_sum(weights, axis=-1))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step = gradient_doctor.watch(
        train_step, optimizer=optimizer, stop_on_problem=stop_on_problem, verbose=False
    )
    return model, step


X = np.ones((4, 3), "float32")


def test_first_bad_step_is_skipped_and_training_stops():
    model, step = _loop(stop_on_problem=True)
    step(X, tf.constant(1.0))
    step(X, tf.constant(2.0))
    good = [w.numpy() for w in model.weights]
    with pytest.raises(TrainingStopped, match="step 2: forward_overflow"):
        step(X, tf.constant(1e4))
    for before, after in zip(good, model.weights, strict=True):
        np.testing.assert_array_equal(before, after.numpy())
    finding = step.report().problems[0]
    assert finding.origin.op == "Exp"
    assert (
        finding.origin.source.code == "weights = tf.exp(logits)  # overflows once `scale` is large"
    )
    assert finding.origin.inputs[0].max > 88.72


def test_keep_going_records_and_resumes():
    model, step = _loop(stop_on_problem=False)
    step(X, tf.constant(1e4))
    frozen = [w.numpy() for w in model.weights]
    step(X, tf.constant(1.0))  # finite again: this update is applied
    assert any(not np.array_equal(a, b.numpy()) for a, b in zip(frozen, model.weights, strict=True))
    assert len(step.report().problems) == 1
    assert step.report().steps_watched == 2


def test_watch_rejects_a_non_optimizer():
    with pytest.raises(TypeError, match="Received: optimizer='adam'"):
        gradient_doctor.watch(lambda: None, optimizer="adam")


def test_doctor_stops_fit_at_the_bad_batch_with_weights_intact():
    keras.utils.set_random_seed(0)
    x = np.random.randn(96, 4).astype("float32")
    y = np.random.randn(96, 1).astype("float32")
    y[40] = np.inf
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    doctor = gradient_doctor.Doctor(verbose=False)
    model.fit(x, y, batch_size=16, shuffle=False, epochs=3, verbose=0, callbacks=[doctor])
    report = doctor.report()
    assert report.steps_watched == 3  # stopped at the bad batch
    assert report.problems[0].category == "bad_input"
    assert report.problems[0].step == 2
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)


def test_doctor_leaves_nothing_behind_after_fit():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((32, 4), "float32"), np.ones((32, 1), "float32")
    model.fit(x, y, epochs=1, verbose=0, callbacks=[gradient_doctor.Doctor(verbose=False)])
    assert "apply" not in vars(model.optimizer)  # the guard is off: nobody would read it
    assert "train_step" not in vars(model)
    before = model.get_weights()
    model.fit(x, y * 2, epochs=1, verbose=0)  # unwatched training still updates
    assert any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))


def test_a_failing_replay_still_reports_the_step_with_a_warning(monkeypatch):
    import gradient_doctor.tf_adapter.localize.step_origin as localize_module

    def broken_replay(call):
        raise RuntimeError("replay exploded")

    monkeypatch.setattr(localize_module, "replay_step", broken_replay)
    model, step = _loop(stop_on_problem=True)
    with pytest.warns(UserWarning, match="could not replay step 0 .*replay exploded"):
        with pytest.raises(TrainingStopped):
            step(X, tf.constant(1e4))
    finding = step.report().problems[0]
    assert finding.step == 0
    assert finding.origin is None


def test_guard_compiles_under_xla_and_still_keeps_the_bad_batch():
    keras.utils.set_random_seed(0)
    x = np.random.randn(64, 3).astype("float32")
    y = np.random.randn(64, 1).astype("float32")
    y[20] = np.inf  # the second batch of 16
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    doctor = gradient_doctor.Doctor(verbose=False)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[doctor])
    (finding,) = doctor.report().problems
    assert (finding.category, finding.step) == ("bad_input", 1)
    assert "row 4" in finding.explanation


def test_steps_per_execution_reports_the_true_batch_index():
    keras.utils.set_random_seed(0)
    x = np.random.randn(160, 3).astype("float32")
    y = np.random.randn(160, 1).astype("float32")
    y[6 * 16 + 3] = np.nan  # in batch 6, the third of the second execution of 4
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
    doctor = gradient_doctor.Doctor(verbose=False)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[doctor])
    (finding,) = doctor.report().problems
    assert (finding.category, finding.step) == ("bad_input", 6)
    assert doctor.report().steps_watched == 7


def _eager_pair():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    return model, keras.optimizers.Adam(0.05)


def _eager_gradients(model, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x) ** 2)
    return tape.gradient(loss, model.trainable_variables)


def test_an_eager_update_is_checked_by_one_compiled_call_and_a_nan_is_skipped():
    from gradient_doctor.tf_adapter.step.guard import Guard

    plain, plain_optimizer = _eager_pair()
    watched, optimizer = _eager_pair()
    guard = Guard()
    x = tf.constant(np.random.default_rng(0).standard_normal((8, 3)), tf.float32)
    for _ in range(3):  # healthy eager updates: bit-identical to the optimizer's own
        plain_optimizer.apply(_eager_gradients(plain, x), plain.trainable_variables)
        grads = _eager_gradients(watched, x)
        guard.apply(optimizer.apply, optimizer, grads, watched.trainable_variables)
    for a, b in zip(plain.weights, watched.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    (compiled,) = guard._compiled.values()  # one per optimizer and variable list
    traces = compiled.experimental_get_tracing_count()  # the first call's only
    assert guard.read().updates == 3 and not guard.read().tripped
    assert guard.read().grad_norm == pytest.approx(
        float(np.sqrt(sum(np.sum(g.numpy() ** 2) for g in grads))), rel=1e-5
    )

    good = [w.numpy() for w in watched.weights]
    bad = [g * np.float32("nan") for g in grads]
    guard.apply(optimizer.apply, optimizer, bad, watched.trainable_variables)
    stats = guard.read()
    assert stats.tripped and stats.skipped == 1
    guard.apply(optimizer.apply, optimizer, grads, watched.trainable_variables)
    assert guard.read().skipped == 2  # the latch stays closed until reset
    for before, after in zip(good, watched.weights, strict=True):
        np.testing.assert_array_equal(before, after.numpy())
    guard.reset()
    guard.apply(optimizer.apply, optimizer, grads, watched.trainable_variables)
    assert not guard.read().tripped
    assert any(not np.array_equal(a, b.numpy()) for a, b in zip(good, watched.weights))
    assert compiled.experimental_get_tracing_count() == traces


def test_of_two_optimizers_the_one_whose_update_failed_is_the_one_diagnosed():
    # An actor's update fails; the critic's, applied after it in the same step, is
    # finite: the diagnosis (its learning rate) is the actor's optimizer's.
    keras.utils.set_random_seed(0)
    actor = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    critic = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    actor_optimizer = keras.optimizers.SGD(0.05)
    critic_optimizer = keras.optimizers.Adam(0.002)

    @tf.function
    def train_step(x, scale):
        with tf.GradientTape(persistent=True) as tape:
            actor_loss = tf.reduce_mean(tf.exp(actor(x) * scale))  # overflows at a large scale
            critic_loss = tf.reduce_mean(tf.square(critic(x)))
        actor_grads = tape.gradient(actor_loss, actor.trainable_variables)
        critic_grads = tape.gradient(critic_loss, critic.trainable_variables)
        actor_optimizer.apply_gradients(zip(actor_grads, actor.trainable_variables))
        critic_optimizer.apply_gradients(zip(critic_grads, critic.trainable_variables))
        return actor_loss

    step = gradient_doctor.watch(
        train_step,
        optimizer=[critic_optimizer, actor_optimizer],
        stop_on_problem=False,
        verbose=False,
        trial_steps=0,
    )
    step(X, tf.constant(1.0))
    step(X, tf.constant(1e4))
    (finding,) = step.report().problems
    assert finding.origin.op == "Exp"
    (lower_rate,) = [fix for fix in finding.fixes if fix.family == "lower_learning_rate"]
    assert lower_rate.title == "Lower the learning rate 10x, from 0.05 to 0.005"  # the actor's
