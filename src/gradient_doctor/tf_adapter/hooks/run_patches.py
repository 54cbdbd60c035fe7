"""What `gradient-doctor run` changes in TensorFlow and Keras to watch an unchanged script."""

from __future__ import annotations

import functools
import inspect
import sys

import keras
import tensorflow as tf

from gradient_doctor.core.attribute_patches import AttributePatches
from gradient_doctor.core.finiteness_tests import FinitenessTests, TensorTests
from gradient_doctor.core.source_frames import (
    is_user_file,
    statement_line,
    user_frame,
    user_line,
)
from gradient_doctor.errors import TrainingStopped
from gradient_doctor.tf_adapter._tf_internals import (
    BaseOptimizer,
    polymorphic_function,
    updated_variables,
)
from gradient_doctor.tf_adapter.hooks import (
    compile_sites,
    creation_sites,
    eager_trace,
    state_writes,
)
from gradient_doctor.tf_adapter.hooks.callback import Doctor
from gradient_doctor.tf_adapter.hooks.custom_loop import call_watched_step
from gradient_doctor.tf_adapter.hooks.eager_trace import TracedOp
from gradient_doctor.tf_adapter.hooks.loss_inputs import LossInputs
from gradient_doctor.tf_adapter.hooks.model_hooks import attach
from gradient_doctor.tf_adapter.hooks.numerics_checks import check_numerics_left_to_the_doctor
from gradient_doctor.tf_adapter.localize import step_context
from gradient_doctor.tf_adapter.localize.eager_replay import enclosing_step
from gradient_doctor.tf_adapter.localize.trace_replay import traced_step
from gradient_doctor.tf_adapter.step.guard import in_guarded_update
from gradient_doctor.tf_adapter.trials.trial_data import FitCall
from gradient_doctor.tf_adapter.watcher import Watcher

GUARDED = "_gradient_doctor_guarded"


def _is_user_function(function) -> bool:
    python_function = getattr(function, "_python_function", None)
    target = inspect.unwrap(getattr(python_function, "__func__", python_function))
    code = getattr(target, "__code__", None)
    return code is not None and is_user_file(code.co_filename)


class RunPatches:
    """Installs and removes the patches; everything they find goes to one `Watcher`."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher
        self._patches = AttributePatches()
        # The script's own finiteness tests: one that finds the loss of the eager step
        # in progress not finite ends that step there, before the script skips or stops.
        self._tests = FinitenessTests(functools.partial(_tested_loss, watcher), _FINITENESS_TESTS)

    def install(self) -> None:
        watcher = self.watcher
        # Where each layer, model and optimizer is built, which of the user's calls left
        # NaN or Inf in a layer's state, and which probability loss was handed a layer's
        # raw output: recorded as they happen, for the diagnosis.
        for owner, name, value in [
            *creation_sites.recording_patches(),
            *compile_sites.recording_patches(),
            *state_writes.recording_patches(),
            *LossInputs(watcher.session.loss_input_seen).patches(),
        ]:
            self._patches.replace(owner, name, value)
        # A LossScaleOptimizer overrides `apply`: it is guarded as a whole (it decides
        # which overflowing steps to skip), and its inner optimizer's update runs inside.
        for owner in (BaseOptimizer, keras.optimizers.LossScaleOptimizer):
            self._patches.replace(owner, "apply", _guarded_apply(watcher, owner.apply))

        original_call = polymorphic_function.Function.__call__

        @functools.wraps(original_call)
        def call(function, *args, **kwargs):
            if not _is_user_function(function):
                return original_call(function, *args, **kwargs)
            return call_watched_step(
                watcher,
                lambda *a, **k: original_call(function, *a, **k),
                args,
                kwargs,
                marker=function,
                signature_of=function.python_function,
                traceable=function.python_function,
            )

        self._patches.replace(polymorphic_function.Function, "__call__", call)

        original_fit = keras.Model.fit

        fit_signature = inspect.signature(original_fit)

        @functools.wraps(original_fit)
        def fit(model, *args, **kwargs):
            bound = fit_signature.bind(model, *args, **kwargs)
            callbacks = list(bound.arguments.get("callbacks") or [])
            scripts = tuple(callbacks)
            doctors = [c for c in callbacks if isinstance(c, Doctor)]
            for doctor in doctors:  # the script's own Doctor reports to this run
                doctor.adopt(watcher)
            if not doctors:
                # First: its check of the batch runs before the script's own callbacks read
                # the batch's logs (one that exits on a NaN loss, TerminateOnNaN).
                callbacks.insert(0, Doctor(watcher=watcher))
            bound.arguments["callbacks"] = callbacks
            data = bound.arguments
            watcher.fit_call = FitCall(
                statement_line(user_frame()),  # all its lines: a patch rewrites the call
                data.get("x"),
                data.get("y"),
                data.get("sample_weight"),
                data.get("batch_size"),
                tuple(c for c in scripts if not isinstance(c, Doctor)),
            )
            watcher.trial_batches = watcher.fit_call.batches()
            try:
                return original_fit(*bound.args, **bound.kwargs)
            finally:
                watcher.trial_batches = None

        self._patches.replace(keras.Model, "fit", fit)
        self._patches.replace(keras.Model, "train_on_batch", _watched_train_on_batch(watcher))
        self._patches.replace(
            tf.debugging, "enable_check_numerics", check_numerics_left_to_the_doctor
        )
        self._tests.install()
        eager_trace.enable()

    def script_ended(self, held) -> None:
        """The script ended its own way: when it stopped on a loss it found not finite,
        before any `tape.gradient` (`tf.debugging.check_numerics(loss, ...)` raising, a
        `break` on `np.isnan`), that step is the failing one, run again from its trace
        (`_check_held_loss`). The loss is looked for among what the script held, then
        among the scalars the step in progress made, latest first (a function's loop
        that broke and returned holds nothing any more; its trace does)."""
        _check_held_loss(self.watcher, [*held, *_step_scalars()])

    def uninstall(self) -> None:
        eager_trace.disable()
        self._tests.uninstall()
        self._patches.restore()


def _watched_train_on_batch(watcher: Watcher):
    """`keras.Model.train_on_batch`, each call read by the guard like one step of `fit`.

    A hand-written loop of `train_on_batch` calls (common in GAN scripts) passes no
    callbacks: the model is hooked on its first call and the hook stays, so the
    step is traced once and every call is checked right after it ran.
    """
    original = keras.Model.train_on_batch

    @functools.wraps(original)
    def train_on_batch(model, *args, **kwargs):
        if not getattr(model, "compiled", False):  # Keras's own error says what to do
            return original(model, *args, **kwargs)
        hook = attach(model, watcher)
        watcher.model_trains_nothing(model, user_line())  # a problem, the first time
        logs = original(model, *args, **kwargs)
        finding = hook.after_steps()
        if finding is not None and watcher.stop_on_problem:
            raise TrainingStopped(finding)
        return logs

    return train_on_batch


def _guarded_apply(watcher: Watcher, original_apply):
    """An optimizer `apply` routed through the guard; a plain eager update is then checked."""

    @functools.wraps(original_apply)
    def apply(optimizer, grads, trainable_variables=None):
        bound = original_apply.__get__(optimizer)
        if in_guarded_update():  # the inner optimizer of a guarded LossScaleOptimizer
            return bound(grads, trainable_variables)
        watcher.optimizer = optimizer
        # An inline eager step's trace ends here: the guard's and the optimizer's ops
        # are not the step's.
        traced = tf.executing_eagerly() and step_context.current_scope() is None
        trace = eager_trace.take() if traced else None
        grads = list(grads)
        result = watcher.guard.apply(bound, optimizer, grads, trainable_variables)
        if (
            tf.executing_eagerly()
            and step_context.current_scope() is None
            and step_context.current_recorder() is None
        ):
            variables = updated_variables(optimizer, trainable_variables)
            _check_eager_update(watcher, trace, grads, variables)
        return result

    setattr(apply, GUARDED, True)
    return apply


def _tested_loss(watcher: Watcher, held) -> None:
    """The script's own test found `held` (its loss, or its caller's values) not finite:
    the step in progress ends there, training stops as at an update."""
    finding = _check_held_loss(watcher, held)
    if finding is not None and watcher.stop_on_problem:
        raise TrainingStopped(finding)


def _step_scalars() -> list:
    """The floating scalars the eager step in progress made, latest first (none when no
    step is in progress)."""
    trace = eager_trace.current()
    if trace is None or trace.closed or trace.dropped:
        return []
    made = [t for entry in trace.entries if isinstance(entry, TracedOp) for t in entry.outputs]
    return [t for t in reversed(made) if _eager_scalar(t)]


def _eager_scalar(value) -> bool:
    """An eager floating scalar tensor (it holds its value): a loss, maybe."""
    return (
        isinstance(value, tf.Tensor)
        and hasattr(value, "numpy")
        and value.dtype.is_floating
        and value.shape.num_elements() == 1
    )


# TensorFlow's finiteness tests (graph tensors, traced inside a function, are passed over).
_FINITENESS_TESTS = TensorTests(
    tests=tuple((tf.math, name, name == "is_finite") for name in ("is_nan", "is_inf", "is_finite")),
    self_comparisons=((tf.Tensor, "__ne__"),),
    loss_like=_eager_scalar,
    true=lambda answer: bool(tf.reduce_all(answer)),
    is_user=is_user_file,
)


def _check_held_loss(watcher: Watcher, held):
    """A loss of the inline eager step in progress, not finite, that the script held when
    it ended (`held`): the step is read as one that failed, with no update skipped (the
    script made none), and run again from its trace to the first op that wrote a value
    that is not finite; the finding, or None when `held` holds no such loss."""
    trace = eager_trace.current()
    if trace is None or trace.closed or trace.dropped:
        return None
    losses = [value for value in held if _nonfinite_loss(value) and trace.produced([value])]
    if not losses:
        return None
    trace = eager_trace.take()
    named: list = []

    def replay_call():
        call, found = traced_step(trace, [], [], None, loss=losses[0])
        named.extend(found)
        return call

    try:
        return watcher.stopped_by_own_check(replay_call, lambda: named)
    finally:
        eager_trace.release(trace)


def _nonfinite_loss(value) -> bool:
    """A loss an eager step computed: a floating scalar tensor whose value is not finite."""
    return _eager_scalar(value) and not bool(tf.reduce_all(tf.math.is_finite(value)))


def _check_eager_update(watcher: Watcher, trace, grads: list, variables: list) -> None:
    """After an update made in plain eager code: the step is this update.

    It is run again from its trace when the update's gradients were computed in it
    (an inline loop, `eager_trace`); else from the user's function that makes the
    update, found on the stack; else it cannot be run again.
    """
    frame = user_frame(sys._getframe(2))
    named: list = []

    def replay_call():
        call, found = traced_step(trace, grads, variables, frame) if trace else (None, [])
        if call is None:
            call, found = enclosing_step(frame)
        named.extend(found)
        return call

    finding = watcher.after_step(replay_call, lambda: named)
    eager_trace.release(trace)
    if finding is not None and watcher.stop_on_problem:
        raise TrainingStopped(finding)
