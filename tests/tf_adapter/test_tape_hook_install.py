"""The tape hooks are held by each watcher and put back when the last one lets go."""

import pytest

tf = pytest.importorskip("tensorflow")

from gradient_doctor.tf_adapter.hooks import tape_hook  # noqa: E402
from gradient_doctor.tf_adapter.watcher import make_watcher  # noqa: E402


@pytest.fixture
def no_other_holders():
    """Run with no watcher of earlier tests holding the hooks; put their hold back after."""
    held = tape_hook._holders
    tape_hook._holders = 0
    tape_hook.uninstall_tape_hook()
    yield
    tape_hook._holders = 0
    for _ in range(held):
        tape_hook.install_tape_hook()


def test_the_last_watcher_to_uninstall_puts_tensorflow_back(no_other_holders):
    assert tf.GradientTape.gradient is tape_hook._original_gradient
    first, second = make_watcher(verbose=False), make_watcher(verbose=False)
    assert tf.GradientTape.gradient is tape_hook._gradient
    first.uninstall()
    first.uninstall()  # a second call releases nothing more
    assert tf.GradientTape.gradient is tape_hook._gradient
    assert tf.GradientTape.__enter__ is tape_hook._enter
    second.uninstall()
    assert tf.GradientTape.gradient is tape_hook._original_gradient
    assert tf.GradientTape.__enter__ is tape_hook._original_enter
    assert tf.GradientTape.__exit__ is tape_hook._original_exit
    assert tf.GradientTape.watch is tape_hook._original_watch


def _gradient_with_a_none():
    x, unused = tf.Variable(3.0), tf.Variable(1.0)
    with tf.GradientTape() as tape:
        y = x * x
    return tape.gradient(y, [x, unused]), unused


def test_none_gradients_are_noted_only_while_a_watcher_holds_the_hooks(no_other_holders):
    watcher = make_watcher(verbose=False)
    (grad, none), unused = _gradient_with_a_none()
    assert float(grad) == 6.0 and none is None
    assert tape_hook.gradient_call_of([unused]) is not None  # noted while held
    watcher.uninstall()
    (grad, none), unused = _gradient_with_a_none()
    assert float(grad) == 6.0 and none is None
    assert tape_hook.gradient_call_of([unused]) is None  # TensorFlow's own gradient


def test_each_update_takes_the_loss_of_the_tape_that_made_its_gradients():
    # A GAN's step takes both tapes' gradients before it applies either: the
    # discriminator's update was given the generator's loss, the generator's none.
    from gradient_doctor.tf_adapter.localize import step_context

    d_loss, g_loss = tf.constant(0.7), tf.constant(2.5)
    d_grads, g_grads = [tf.constant(1.0)], [tf.constant(2.0), tf.constant(3.0)]
    step_context.note_loss(d_loss, (1, 2), d_grads)
    step_context.note_loss(g_loss, (3, 4), g_grads)
    assert step_context.take_loss(d_grads) == (d_loss, (1, 2))
    assert step_context.take_loss(g_grads) == (g_loss, (3, 4))
    # Gradients the user transformed first (clipped) fall back to the latest target.
    step_context.note_loss(d_loss, (5, 6), d_grads)
    assert step_context.take_loss([tf.constant(1.0)])[0] is d_loss


def test_a_variable_made_with_no_name_is_named_as_the_script_binds_it(monkeypatch):
    # Raw tf.Variables are all "Variable" to TensorFlow: a report said "no gradient
    # reaches 2 trained variables: Variable and Variable".
    import sys
    import types

    from gradient_doctor.tf_adapter.localize.missing_gradients import variable_name

    script = types.ModuleType("__main__")
    script.W1, script.b1 = tf.Variable(tf.zeros([3, 2])), tf.Variable(tf.zeros([2]))
    unbound = tf.Variable(0.0)
    named = tf.Variable(0.0, name="scale")
    script.scale = named
    monkeypatch.setitem(sys.modules, "__main__", script)
    assert (variable_name(script.W1), variable_name(script.b1)) == ("W1", "b1")
    assert variable_name(unbound).startswith("Variable")
    assert variable_name(named) == "scale"
