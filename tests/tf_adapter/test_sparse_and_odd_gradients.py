"""Sparse and odd gradients: embeddings, constraints, integer variables, gradient
accumulation, and clipping that was already on."""

import warnings

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import gradient_doctor  # noqa: E402


def _fit(build, optimizer, x, y, watched, seed=5, epochs=2, batch_size=16):
    keras.utils.set_random_seed(seed)
    model = build()
    model.compile(optimizer=optimizer(), loss="mse")
    doctor = gradient_doctor.Doctor(verbose=False)
    history = model.fit(
        x,
        y,
        batch_size=batch_size,
        epochs=epochs,
        shuffle=False,
        verbose=0,
        callbacks=[doctor] if watched else [],
    )
    return history.history["loss"], [w.numpy() for w in model.weights], model, doctor


def _assert_watching_changes_nothing(build, optimizer, x, y, **kwargs):
    plain_losses, plain_weights, plain_model, _ = _fit(build, optimizer, x, y, False, **kwargs)
    losses, weights, model, doctor = _fit(build, optimizer, x, y, True, **kwargs)
    assert losses == plain_losses
    for plain, watched in zip(plain_weights, weights, strict=True):
        np.testing.assert_array_equal(plain, watched)
    assert doctor.report().status == "healthy"
    return plain_model, model, doctor


def _ids_data():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, size=(128, 5))
    return ids, rng.normal(size=(128, 1)).astype("float32")


def _embedding_model(**embedding_kwargs):
    return keras.Sequential(
        [
            keras.Input((5,), dtype="int32"),
            keras.layers.Embedding(1000, 8, **embedding_kwargs),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )


def test_embedding_sparse_gradients_are_watched_and_unchanged():
    ids, y = _ids_data()
    _assert_watching_changes_nothing(_embedding_model, lambda: keras.optimizers.Adam(1e-2), ids, y)


def test_guard_measures_an_indexed_slices_gradient_by_its_values():
    keras.utils.set_random_seed(0)
    ids, y = _ids_data()
    model = _embedding_model()
    optimizer = keras.optimizers.SGD(0.1)

    @tf.function
    def train_step(batch, targets):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch) - targets))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return grads

    step = gradient_doctor.watch(train_step, optimizer=optimizer, verbose=False)
    grads = step(ids[:16], y[:16])
    assert isinstance(grads[0], tf.IndexedSlices)  # the table's gradient stayed sparse
    squares = sum(
        float(tf.reduce_sum(tf.square(g.values if isinstance(g, tf.IndexedSlices) else g)))
        for g in grads
    )
    assert step.watcher.guard.read().grad_norm == pytest.approx(np.sqrt(squares), rel=1e-5)


def test_constrained_variables_are_unchanged_by_watching():
    ids, y = _ids_data()

    def build():
        return keras.Sequential(
            [
                keras.Input((5,), dtype="int32"),
                keras.layers.Embedding(1000, 8, embeddings_constraint=keras.constraints.UnitNorm()),
                keras.layers.GlobalAveragePooling1D(),
                keras.layers.Dense(4, kernel_constraint=keras.constraints.MaxNorm(0.5)),
                keras.layers.Dense(1, kernel_constraint=keras.constraints.NonNeg()),
            ]
        )

    _, model, _ = _assert_watching_changes_nothing(build, lambda: keras.optimizers.SGD(0.5), ids, y)
    assert (model.layers[-1].kernel.numpy() >= 0).all()  # the constraints did apply


class CountingDense(keras.layers.Layer):
    """A dense unit that counts its calls (int, not trainable) and holds an int offset
    that a user marked trainable by mistake."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 1))
        self.calls = self.add_weight(shape=(), dtype="int32", initializer="zeros", trainable=False)
        self.offset = self.add_weight(shape=(), dtype="int32", initializer="zeros")

    def call(self, x):
        self.calls.assign_add(1)
        return tf.matmul(x, self.kernel) + tf.cast(self.offset, x.dtype)


def test_integer_variables_are_left_alone_and_named():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)

    def build():
        return keras.Sequential([keras.Input((3,)), CountingDense()])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain, model, doctor = _assert_watching_changes_nothing(
            build, lambda: keras.optimizers.SGD(0.1), x, y
        )
    messages = [str(w.message) for w in caught]
    assert any("not floating point" in m and "int32" in m for m in messages), messages
    assert int(model.layers[0].calls.numpy()) == int(plain.layers[0].calls.numpy())
    assert doctor.report().problems == ()


def test_gradient_accumulation_is_bit_identical_when_watched():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(128, 6)).astype("float32")
    y = (x[:, :1] - 2 * x[:, 1:2]).astype("float32")

    def build():
        return keras.Sequential(
            [keras.Input((6,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
        )

    def optimizer():
        return keras.optimizers.Adam(1e-2, gradient_accumulation_steps=4)

    plain, model, _ = _assert_watching_changes_nothing(build, optimizer, x, y)
    assert int(model.optimizer.iterations.numpy()) == int(plain.optimizer.iterations.numpy())


class Attention(keras.layers.Layer):
    def call(self, scores):
        weights = tf.exp(scores)
        return weights / tf.reduce_sum(weights, axis=-1, keepdims=True)


@pytest.mark.parametrize(
    ("optimizer", "clipping"),
    [
        (lambda: keras.optimizers.SGD(0.01, global_clipnorm=1.0), "global_clipnorm=1.0"),
        (
            lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01, clipnorm=0.5)),
            "clipnorm=0.5",
        ),
    ],
    ids=["global_clipnorm", "clipnorm_inside_loss_scaling"],
)
def test_clipping_that_was_on_is_named_in_the_report(optimizer, clipping):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64, 6)).astype("float32")
    y = np.eye(6, dtype="float32")[np.argmax(x, axis=1)]
    x[40] *= 1e3  # the third batch of 16 overflows exp
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(6), Attention()])
    model.compile(optimizer=optimizer(), loss="categorical_crossentropy")
    doctor = gradient_doctor.Doctor(verbose=False)
    model.fit(x, y, batch_size=16, shuffle=False, verbose=0, callbacks=[doctor])
    (finding,) = doctor.report().problems
    assert (finding.category, finding.step) == ("forward_overflow", 2)
    why = {item.remedy: item.why for item in finding.not_fixes}["gradient_clipping"]
    assert why.startswith(f"Clipping ({clipping}) was already on and did not prevent this.")
