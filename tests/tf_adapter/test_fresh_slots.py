"""A trial from before the first step starts the optimizer's slots as a fresh optimizer would."""

import keras
import numpy as np
import pytest

from gradient_doctor.tf_adapter.trials.fresh_slots import start_values


@pytest.fixture
def mixed_precision():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def _trained(optimizer) -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(np.ones((8, 3), "float32"), np.ones((8, 2), "float32"), verbose=0, epochs=2)
    return model


def _by_name(starts) -> dict[str, np.ndarray]:
    return {variable.path.split("/")[-1]: value.numpy() for variable, value in starts}


def test_a_loss_scale_and_adagrads_accumulators_start_where_keras_starts_them(mixed_precision):
    model = _trained(keras.optimizers.Adagrad(0.5, initial_accumulator_value=0.25))
    optimizer = model.optimizer
    trained = {v.path.split("/")[-1]: v.numpy() for v in optimizer.variables}
    starts = _by_name(start_values([optimizer], held=set()))
    assert starts["dynamic_scale"] == 32768.0  # not zero: the loss scale divides by it
    kernel = next(value for name, value in starts.items() if "kernel_accumulator" in name)
    np.testing.assert_array_equal(kernel, np.full((3, 2), 0.25, "float32"))
    assert not np.array_equal(kernel, trained[next(n for n in trained if "kernel_acc" in n)])
    assert starts["learning_rate"] == np.float32(0.5)
    assert all(value == 0 for name, value in starts.items() if name == "iteration")


def test_only_the_variables_a_snapshot_does_not_hold_are_given_a_start():
    optimizer = _trained(keras.optimizers.Adam(0.01)).optimizer
    held = {id(optimizer.iterations), id(optimizer.learning_rate)}
    held |= {id(getattr(v, "value", v)) for v in (optimizer.iterations,)}
    starts = start_values([optimizer], held)
    assert len(starts) == len(optimizer.variables) - 2
    assert all(not np.any(value.numpy()) for _, value in starts)  # Adam's moments start at 0


def test_an_optimizer_that_cannot_be_rebuilt_starts_its_slots_at_zero():
    class Opaque(keras.optimizers.SGD):
        @classmethod
        def from_config(cls, config):
            raise TypeError("needs arguments its config does not keep")

    optimizer = _trained(Opaque(0.1, momentum=0.9)).optimizer
    starts = start_values([optimizer], held=set())
    assert starts and all(not np.any(value.numpy()) for _, value in starts)
