"""Keras's cross-entropies handed a layer's raw output are found as Keras computes them:
in a traced `fit` step (the layer that made the values, the `compile` line that named
the loss), in a `tf.function` loop (the line that built the loss object), and eagerly
(the values, the user's call of the function); a softmax's or sigmoid's output, logits
declared as such, a normalisation of the user's own, and a metric's cross-entropy are
left alone. Patches installed as `gradient-doctor run` installs them, and put back."""

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import keras_nn
from gradient_doctor.tf_adapter.hooks import compile_sites, creation_sites
from gradient_doctor.tf_adapter.hooks.loss_inputs import LOSSES, LossInputs
from tests.conftest import line_of, patches_installed

HERE = "tests/tf_adapter/test_loss_inputs.py"


@contextlib.contextmanager
def _watched():
    """The loss inputs found while the block runs, with the recording patches on."""
    found = []
    patches = [
        *creation_sites.recording_patches(),
        *compile_sites.recording_patches(),
        *LossInputs(found.append).patches(),
    ]
    with patches_installed(patches):
        yield found


def _line(tag: str) -> int:
    """The line of this file that ends in the comment `# tag`."""
    return line_of(HERE, f"# {tag}")


def _data(classes: int = 3):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 5)).astype("float32")
    return x, rng.integers(0, classes, 64)


def test_a_fit_step_names_the_layer_and_the_compile_line_that_named_the_loss():
    x, y = _data()
    with _watched() as found:
        model = keras.Sequential(
            [keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)]  # raw scores
        )
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])  # named
        model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    (fed,) = found  # once, though Keras traces the step twice
    assert (fed.loss, fed.activation, fed.producer) == (
        "sparse_categorical_crossentropy",
        "softmax",
        "BiasAdd",
    )
    assert (fed.layer, fed.layer_class) == (model.layers[-1].name, "Dense")
    assert fed.layer_site.line == _line("raw scores")
    assert fed.loss_site.line == _line("named")
    assert fed.loss_argument == ("name", "sparse_categorical_crossentropy")


def test_a_traced_loop_names_the_line_that_built_the_loss_object():
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(8, activation="relu")
            self.scores = keras.layers.Dense(3)  # built

        def call(self, inputs):
            return self.scores(self.hidden(inputs))

    x, y = _data()
    with _watched() as found:
        net = Net()
        loss_fn = keras.losses.SparseCategoricalCrossentropy()  # the loss object

        @tf.function
        def loss_of(xb, yb):
            return loss_fn(yb, net(xb))

        loss_of(x, y)
    (fed,) = found
    assert (fed.layer, fed.producer) == (net.scores.name, "BiasAdd")
    assert fed.layer_site.line == _line("built")
    assert fed.loss_site.line == _line("the loss object")
    assert fed.loss_argument == ("call", "SparseCategoricalCrossentropy")


def test_an_eager_call_gives_the_values_and_the_users_call():
    x, y = _data(4)
    with _watched() as found:
        model = keras.Sequential([keras.layers.Dense(4)])
        targets = keras.utils.to_categorical(y, 4)
        for _ in range(5):  # values read on the first calls only, reported once
            loss = keras.losses.categorical_crossentropy(targets, model(x))  # called
    assert np.isfinite(loss.numpy()).all()
    (fed,) = found
    assert fed.producer is None and fed.layer is None
    low, high = fed.values
    assert low < 0 or high > 1
    assert fed.loss_site.line == _line("called")
    assert fed.loss_argument == ("call", "categorical_crossentropy")


class OwnProbabilities(keras.Model):
    """Probabilities made by the user's own normalisation: no activation, no flag."""

    def __init__(self):
        super().__init__()
        self.scores = keras.layers.Dense(3)

    def call(self, inputs):
        positive = tf.nn.softplus(self.scores(inputs)) + 1e-3
        return positive / tf.reduce_sum(positive, axis=-1, keepdims=True)


@pytest.mark.parametrize(
    "build, loss, metrics",
    [
        (
            lambda: [keras.layers.Dense(3, activation="softmax")],
            "sparse_categorical_crossentropy",
            [],
        ),
        (
            lambda: [keras.layers.Dense(3), keras.layers.Activation("softmax")],
            "sparse_categorical_crossentropy",
            [],
        ),
        (
            lambda: [keras.layers.Dense(3)],
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            [],
        ),
        (None, "sparse_categorical_crossentropy", []),
        (lambda: [keras.layers.Dense(3)], "mse", ["categorical_crossentropy"]),
    ],
    ids=["softmax_activation", "softmax_layer", "from_logits", "own_normalisation", "metric"],
)
def test_probabilities_logits_declared_and_metrics_are_left_alone(build, loss, metrics):
    x, y = _data()
    targets = keras.utils.to_categorical(y, 3) if loss == "mse" else y
    with _watched() as found:
        model = OwnProbabilities() if build is None else keras.Sequential(build())
        model.compile("adam", loss, metrics=metrics)
        model.fit(x, targets, epochs=1, batch_size=16, verbose=0)
    assert found == []


def test_the_patches_are_put_back():
    originals = {name: getattr(keras_nn, name) for name in ("binary_crossentropy",)}
    init = keras.losses.Loss.__init__
    with _watched():
        assert keras_nn.binary_crossentropy is not originals["binary_crossentropy"]
    assert keras_nn.binary_crossentropy is originals["binary_crossentropy"]
    assert keras.losses.Loss.__init__ is init


def test_the_keras_callback_finds_it_too_and_puts_the_losses_back():
    import gradient_doctor

    originals = {name: getattr(keras_nn, name) for name in ("categorical_crossentropy",)}
    keras.utils.set_random_seed(0)
    x, y = _data()
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    model.compile("adam", "sparse_categorical_crossentropy")
    doctor = gradient_doctor.Doctor(verbose=False, trial_steps=0)
    model.fit(x, y, epochs=1, batch_size=16, verbose=0, callbacks=[doctor])
    (problem,) = doctor.report().problems
    assert (problem.category, problem.step) == ("logits_as_probabilities", 0)
    activation = next(fix for fix in problem.fixes if fix.family == "activation_change")
    assert f"Give layer `{model.layers[-1].name}` the softmax activation" in activation.title
    assert {name: getattr(keras_nn, name) for name in originals} == originals


def test_a_fit_that_raises_leaves_kerass_losses_as_they_were():
    import gradient_doctor

    """Keras calls no `on_train_end` when `fit` raises: the losses are watched only
    while the step's Python runs, and put back however it ends."""
    originals = {name: getattr(keras_nn, name) for name in LOSSES}

    class Interrupt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                raise KeyboardInterrupt

    keras.utils.set_random_seed(0)
    x, y = _data()
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    model.compile("adam", "sparse_categorical_crossentropy", run_eagerly=True)
    doctor = gradient_doctor.Doctor(verbose=False, trial_steps=0)
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, epochs=1, batch_size=16, verbose=0, callbacks=[doctor, Interrupt()])
    assert {name: getattr(keras_nn, name) for name in LOSSES} == originals
    (problem,) = doctor.report().problems  # seen while the eager steps ran
    assert problem.category == "logits_as_probabilities"


@pytest.mark.parametrize("traced", [True, False], ids=["tf_function", "eager"])
def test_tf_nn_logit_losses_handed_a_sigmoid_layers_output_are_found(traced):
    x, _ = _data()
    labels = (x[:, :1] > 0).astype("float32")
    with _watched() as found:
        model = keras.Sequential(
            [keras.Input((5,)), keras.layers.Dense(1, activation="sigmoid")]  # squashed
        )

        def loss_of(xb, yb):
            return tf.nn.sigmoid_cross_entropy_with_logits(labels=yb, logits=model(xb))  # loss

        (tf.function(loss_of) if traced else loss_of)(x, labels)
    (fed,) = found
    assert (fed.loss, fed.expects, fed.activation) == (
        "sigmoid_cross_entropy_with_logits",
        "logits",
        "sigmoid",
    )
    assert fed.loss_site.line == _line("loss")
    if traced:  # the layer whose activation it was, through the graph
        assert fed.layer == model.layers[-1].name
        assert fed.layer_site.line == _line("squashed")


def test_tf_nn_logit_losses_handed_logits_or_keras_losses_are_left_alone():
    x, y = _data()
    with _watched() as found:
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])

        @tf.function
        def loss_of(xb, yb):
            logits = model(xb)
            raw = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits)
            # Keras's own loss takes a softmax's logits back before calling tf.nn's.
            taken_back = keras.losses.categorical_crossentropy(
                tf.one_hot(yb, 3), tf.nn.softmax(logits)
            )
            return tf.reduce_mean(raw) + tf.reduce_mean(taken_back)

        loss_of(x, y)
    assert found == []
