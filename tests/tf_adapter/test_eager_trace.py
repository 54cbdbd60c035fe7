"""An inline eager step is traced as it runs and replayed from its trace, bit for bit."""

import inspect
import sys

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from gradient_doctor.tf_adapter.hooks import eager_trace  # noqa: E402
from gradient_doctor.tf_adapter.hooks.tape_hook import install_tape_hook  # noqa: E402
from gradient_doctor.tf_adapter.localize.replay import replay_step  # noqa: E402
from gradient_doctor.tf_adapter.localize.step_context import StepScope, step_scope  # noqa: E402
from gradient_doctor.tf_adapter.localize.trace_replay import traced_step  # noqa: E402
from tests.conftest import creation_recording  # noqa: E402


@pytest.fixture
def tracing():
    install_tape_hook()
    eager_trace.enable()
    yield
    eager_trace.disable()


def _model(dropout: float = 0.0):
    keras.utils.set_random_seed(0)
    layers = [keras.Input((5,)), keras.layers.Dense(8, activation="relu")]
    if dropout:
        layers.append(keras.layers.Dropout(dropout))
    return keras.Sequential([*layers, keras.layers.Dense(3)])


def _line(text: str) -> int:
    """The number of the one line of this file that holds `text` (calls of this helper aside)."""
    lines = inspect.getsource(sys.modules[__name__]).splitlines()
    found = [n for n, line in enumerate(lines, start=1) if text in line and "_line(" not in line]
    assert len(found) == 1, found
    return found[0]


def _replayed(grads, variables):
    """Take the trace of the step just run and replay it; its update's gradients."""
    trace = eager_trace.take()
    assert trace is not None
    call, _ = traced_step(trace, grads, variables, sys._getframe(1))
    assert call is not None
    result = replay_step(call)
    assert result.error is None, result.error
    ((replayed, replayed_variables, _),) = result.updates
    assert replayed_variables == list(variables)
    assert not any(r is g for r, g in zip(replayed, grads))  # recomputed, not the originals
    return replayed, result


def _assert_same(expected, got):
    assert len(expected) == len(got)
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_replay_recomputes_the_gradients_bit_for_bit_with_the_steps_own_draws(tracing):
    model = _model(dropout=0.5)
    x = tf.constant(np.random.default_rng(0).normal(size=(16, 5)).astype("float32"))
    with tf.GradientTape() as tape:
        noise = tf.random.normal([16, 3])  # a stateful draw, made inside the step
        out = tf.nn.dropout(model(x, training=True), 0.4) + noise
        loss = tf.reduce_mean(tf.square(out))
    grads = tape.gradient(loss, model.trainable_variables)
    replayed, _ = _replayed(grads, model.trainable_variables)
    # New draws (of Keras's seeded Dropout, tf.nn.dropout or tf.random.normal) would
    # give other gradients.
    _assert_same(grads, replayed)


def test_replayed_events_name_the_users_line_the_layer_and_the_backward_op(tracing):
    with creation_recording():  # as under `gradient-doctor run`: no search of the source
        model = _model()
    x = tf.constant(np.random.default_rng(1).normal(size=(4, 5)).astype("float32"))
    with tf.GradientTape() as tape:
        features = model(x)
        norm = tf.sqrt(tf.reduce_sum(features**2, axis=-1))  # hand-written norm
        loss = tf.reduce_mean(norm)
    grads = tape.gradient(loss, model.trainable_variables)
    _, result = _replayed(grads, model.trainable_variables)
    forward = {}
    for event in result.events:
        if event.phase == "forward":
            forward.setdefault(event.op_type, event)  # the first of each type
    assert forward["Sqrt"].source.file.endswith("test_eager_trace.py")
    assert forward["Sqrt"].source.line == _line("norm = tf.sqrt(")
    assert forward["Sqrt"].source_kind == "op"
    # An op Keras ran inside a Dense: the line that created that Dense.
    assert forward["MatMul"].source.line == _line('keras.layers.Dense(8, activation="relu")')
    assert forward["MatMul"].source_kind == "layer_creation"
    assert forward["MatMul"].layer == f"{model.name}/{model.layers[0].name}"
    (sqrt_grad,) = [e for e in result.events if e.op_type == "SqrtGrad"]
    assert sqrt_grad.phase == "backward"
    assert sqrt_grad.gradient_of == "Sqrt"
    assert sqrt_grad.source == forward["Sqrt"].source


def test_a_gradient_penalty_is_replayed_through_its_inner_tape(tracing):
    model = _model()
    x = tf.constant(np.random.default_rng(2).normal(size=(8, 5)).astype("float32"))
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            inner.watch(x)
            score = tf.reduce_sum(model(x))
        slope = inner.gradient(score, x)
        penalty = tf.reduce_mean(tf.square(tf.norm(slope, axis=-1) - 1.0))
        loss = score + 10.0 * penalty
    grads = outer.gradient(loss, model.trainable_variables)
    replayed, _ = _replayed(grads, model.trainable_variables)
    _assert_same(grads, replayed)


@tf.custom_gradient
def _scaled_identity(x):
    return tf.identity(x), lambda dy: 3.0 * dy  # deliberately not the true derivative


@tf.function
def _helper(x):
    return tf.tanh(x) * 2.0


def test_custom_gradients_and_eager_calls_of_functions_keep_their_own_backward(tracing):
    model = _model()
    x = tf.constant(np.random.default_rng(3).normal(size=(8, 5)).astype("float32"))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(_helper(_scaled_identity(model(x))))
    grads = tape.gradient(loss, model.trainable_variables)
    replayed, _ = _replayed(grads, model.trainable_variables)
    _assert_same(grads, replayed)


def test_hand_written_clipping_after_the_tape_is_run_on_the_recomputed_gradients(tracing):
    model = _model()
    x = tf.constant(np.random.default_rng(4).normal(size=(8, 5)).astype("float32"))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x)))
    grads = tape.gradient(loss, model.trainable_variables)
    clipped, _ = tf.clip_by_global_norm(grads, 0.01)
    replayed, result = _replayed(clipped, model.trainable_variables)
    _assert_same(clipped, replayed)
    assert "ClipByValue" not in {e.op_type for e in result.events if e.phase == "backward"}


def test_an_update_whose_gradients_the_trace_did_not_make_gets_no_replay(tracing):
    model = _model()
    x = tf.ones((2, 5))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x))
    tape.gradient(loss, model.trainable_variables)
    trace = eager_trace.take()
    foreign = [tf.zeros_like(v) for v in model.trainable_variables]
    assert traced_step(trace, foreign, model.trainable_variables, None) == (None, [])


def test_steps_the_doctor_calls_are_not_traced_and_a_new_tape_starts_a_new_trace(tracing):
    model = _model()
    x = tf.ones((2, 5))
    with step_scope(StepScope()):
        with tf.GradientTape():
            model(x)
    assert eager_trace.current() is None
    with tf.GradientTape():
        model(x)
    first = eager_trace.take()
    with tf.GradientTape():
        model(x)
    assert eager_trace.current() is not first
    assert first.closed and not eager_trace.current().closed


def test_a_trace_that_outgrows_its_bound_is_dropped(tracing, monkeypatch):
    monkeypatch.setattr(eager_trace, "MAX_ENTRIES", 10)
    model = _model()
    with tf.GradientTape():
        for _ in range(5):
            model(tf.ones((2, 5)))
    assert eager_trace.take() is None


def test_a_note_that_fails_drops_the_trace_and_leaves_the_step_alone(tracing, monkeypatch):
    def broken(layer):
        raise RuntimeError("no site")

    monkeypatch.setattr(eager_trace, "op_site", broken)
    monkeypatch.setattr(eager_trace, "_warned", False)
    model = _model()
    with pytest.warns(UserWarning, match="stopped tracing an eager step"):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(tf.ones((2, 5))))
    assert tape.gradient(loss, model.trainable_variables)[0] is not None
    assert eager_trace.take() is None


def test_a_batch_taken_from_an_iterator_inside_the_tape_is_the_steps_data(tracing):
    from gradient_doctor.core.evidence import StepHistory, TrainingSetup
    from gradient_doctor.tf_adapter.localize.step_origin import localize

    model = _model()
    x = np.random.default_rng(5).normal(size=(8, 5)).astype("float32")
    x[3, 1] = np.nan
    iterator = iter(tf.data.Dataset.from_tensor_slices(x).batch(8))
    with tf.GradientTape() as tape:
        batch = next(iterator)
        loss = tf.reduce_mean(model(batch))
    grads = tape.gradient(loss, model.trainable_variables)
    call, named = traced_step(eager_trace.take(), grads, model.trainable_variables, sys._getframe())
    assert [name for name, _ in named] == ["batch"]
    evidence = localize(call, 0, named, StepHistory(), TrainingSetup())
    assert evidence.origin is None  # no op of the step made the NaN: it came in the batch
    ((bad,),) = [evidence.bad_inputs]
    assert (bad.tensor, bad.rows, bad.columns) == ("batch", (3,), (1,))


def test_a_checked_trace_is_let_go_once_every_traced_gradient_had_its_update(tracing):
    model = _model()
    with tf.GradientTape() as first, tf.GradientTape() as second:
        out = model(tf.ones((2, 5)))
        loss_a, loss_b = tf.reduce_mean(out), tf.reduce_sum(out)
    first.gradient(loss_a, model.trainable_variables)
    second.gradient(loss_b, model.trainable_variables)
    trace = eager_trace.take()  # the first of two updates (a GAN's two optimizers)
    eager_trace.release(trace)
    assert eager_trace.current() is trace  # the second update may still need it
    assert eager_trace.take() is trace
    eager_trace.release(trace)
    assert eager_trace.current() is None
