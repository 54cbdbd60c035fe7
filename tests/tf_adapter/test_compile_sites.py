"""Where the user compiled a step with XLA: a decorator in the step function's source,
a `Model.compile` call as it happened."""

import keras
import pytest
import tensorflow as tf

from gradient_doctor.tf_adapter.hooks import compile_sites


@pytest.mark.parametrize("decorated", [True, False])
def test_the_decorator_line_of_a_step_function_is_found_in_its_source(decorated):
    if decorated:

        @tf.function(
            jit_compile=True,
        )
        def step(x):
            return x + 1

        found = compile_sites.decorator_line(step.python_function)
        assert found is not None and found.code == "@tf.function("
        assert found.end_line == found.line + 2
    else:

        def step(x):
            return x + 1

        assert compile_sites.decorator_line(step) is None


def test_a_compile_call_is_recorded_at_the_users_line():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    [(owner, name, recording)] = compile_sites.recording_patches()
    assert name not in owner.__dict__  # inherited from Keras's Trainer: put back by deleting
    setattr(owner, name, recording)
    try:
        model.compile(optimizer="sgd", loss="mse", jit_compile=False)  # the recorded line
    finally:
        delattr(owner, name)
    found = compile_sites.compiled_line(model)
    assert found is not None and found.code.endswith("# the recorded line")
    assert compile_sites.compiled_line(None) is None
