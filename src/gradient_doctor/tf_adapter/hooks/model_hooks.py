"""Attach the guard to a Keras model: its optimizer's updates and its `train_step`."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager

import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import flat_layers
from gradient_doctor.tf_adapter.hooks.numerics_checks import numerics_checks_passed_through
from gradient_doctor.tf_adapter.localize.input_scan import keras_batch_names
from gradient_doctor.tf_adapter.localize.step_context import StepCall, StepScope, step_scope
from gradient_doctor.tf_adapter.step.batch_stash import BatchStash
from gradient_doctor.tf_adapter.step.doctor_variables import doctor_variable
from gradient_doctor.tf_adapter.step.random_draws import RandomDraws

_HOOKED = "_gradient_doctor_hooked"
# The key under which the step hands the guard's statistics out with its logs; it is
# taken out again before any callback, progress bar or History sees the logs.
STATS_KEY = "_gradient_doctor_stats"


def guard_optimizer(optimizer, watcher) -> bool:
    """Route this optimizer's `apply` (and so `apply_gradients`) through the guard.

    Returns:
        True when this call installed the hook (undo it with `unguard_optimizer`).
    """
    if optimizer is None or getattr(optimizer, _HOOKED, None) is watcher:
        return False
    if getattr(type(optimizer).apply, "_gradient_doctor_guarded", False):
        return False  # `gradient-doctor run` already guards every optimizer
    original = type(optimizer).apply.__get__(optimizer)

    @functools.wraps(original)
    def apply(grads, trainable_variables=None):
        return watcher.guard.apply(original, optimizer, grads, trainable_variables)

    optimizer.apply = apply
    setattr(optimizer, _HOOKED, watcher)
    return True


def unguard_optimizer(optimizer) -> None:
    """Give the optimizer back its own `apply`: nobody reads the guard any more."""
    optimizer.__dict__.pop("apply", None)
    optimizer.__dict__.pop(_HOOKED, None)


class ModelHook:
    """Wraps one model's `train_step` so a failing batch is kept for the replay."""

    def __init__(self, model, watcher) -> None:
        self.model = model
        self.watcher = watcher
        self.stash = BatchStash(fixed_shapes=bool(getattr(model, "jit_compile", False)))
        self.draws = RandomDraws()
        # Steps this hook has run, counted inside the compiled step, and as Python saw them.
        strategy = getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()
        with strategy.scope():
            self.steps_counter = doctor_variable(
                tf.constant(0, tf.int64), "gradient_doctor_steps_counter"
            )
        self.steps_seen = 0
        self.original_train_step = model.train_step
        self._own_train_step = "train_step" in vars(model)  # set on the instance by the user
        # Entered around each trace (or eager call) of the model's own step: what a
        # caller watches only while the step's Python runs (the Keras callback's loss
        # checks), undone even when the step raises.
        self.during_step: Callable[[], AbstractContextManager] = contextlib.nullcontext

        @functools.wraps(self.original_train_step)
        def train_step(data):
            call = StepCall(self.original_train_step, (data,))
            index = self.steps_counter.read_value()
            with (
                step_scope(
                    StepScope(
                        batch=data, stash=self.stash, draws=self.draws, call=call, step_index=index
                    )
                ) as scope,
                numerics_checks_passed_through(announce=True),
                self.during_step(),
            ):
                # Traced with the model's own numerics checks handing their tensor on:
                # the guard, not a check raising inside Keras's loop, stops the step.
                logs = self.original_train_step(data)
            self.steps_counter.assign_add(1)
            if isinstance(logs, dict) and scope.applied:
                logs = {**logs, STATS_KEY: watcher.guard.stats_tensor()}
            return logs

        model.train_step = train_step
        self.guarded: list = []
        self._fetched = None
        self._failed_batch = None
        self._train_function = None
        self._trainable: list = []
        self.refresh()

    def refresh(self) -> None:
        """Guard the model's optimizers and wrap its train function, again after the
        model was compiled anew (a second `compile` brings a new optimizer and drops
        the train function: one Keras builds afresh would hand the guard's statistics
        to the callbacks, the progress bar and History)."""
        model, watcher = self.model, self.watcher
        for optimizer in _optimizers_of(model):
            if optimizer not in self.guarded and guard_optimizer(optimizer, watcher):
                self.guarded.append(optimizer)
        watcher.optimizer = getattr(model, "optimizer", None)
        if self._train_function is not None and model.train_function is self._train_function:
            return
        # fit() built its step before callbacks run: build it again around the hook.
        model.make_train_function(force=True)
        compiled = model.train_function
        # Which layers trained when the step was traced: a replay traces it afresh, and
        # must train what the compiled step trains (a GAN's discriminator, set
        # `trainable = False` after its step was built, still trains in that step).
        self._trainable = [(layer, layer.trainable) for layer in flat_layers(model)]

        def train_function(iterator):
            watcher.before_step()
            watcher.compiled_by = model
            logs = compiled(iterator)
            if isinstance(logs, dict) and STATS_KEY in logs:
                logs = dict(logs)
                self._fetched = logs.pop(STATS_KEY).numpy()
            return logs

        model.train_function = self._train_function = train_function

    def after_steps(self, steps: int = 1):
        """Read the guard after a call of the train function that ran `steps` steps.

        Returns:
            The new finding when one of the steps was not finite, else None.
        """
        finding = self.watcher.after_step(
            self.replay_call,
            lambda: keras_batch_names(self.kept_batch()),
            self.take_stats(),
            steps=steps,
            step_base=self.steps_seen,
        )
        self.steps_seen += steps
        return finding

    def take_stats(self):
        """The guard's statistics the last step returned (then forgotten), or None."""
        fetched, self._fetched = self._fetched, None
        return fetched

    def replay_call(self) -> StepCall | None:
        """The failing step, ready to run again on the kept batch."""
        # Under tf.distribute, the shard of the replica that failed first.
        replica = max(self.watcher.guard.read().replica, 0)
        data = self._failed_batch = self.stash.restore(replica)
        if data is None:
            warnings.warn(
                "gradient-doctor could not keep the failing batch "
                f"({self.stash.unavailable_reason or 'it was never traced'}); "
                "the step is reported without the op that started it.",
                stacklevel=2,
            )
            return None
        step = self._as_compiled(self.original_train_step)
        return StepCall(step, (data,), traceable=step, draws=self.draws.restore(replica))

    def _as_compiled(self, step):
        """`step`, run with each layer's `trainable` as it was when the compiled step was
        traced (and put back after)."""
        trainable = self._trainable

        @functools.wraps(step)
        def as_compiled(*args, **kwargs):
            now = [(layer, layer.trainable) for layer, _ in trainable]
            try:
                for layer, flag in trainable:
                    if layer.trainable != flag:
                        layer.trainable = flag
                return step(*args, **kwargs)
            finally:
                for layer, flag in now:
                    if layer.trainable != flag:
                        layer.trainable = flag

        return as_compiled

    def kept_batch(self):
        """The failing batch as kept by the guard (after `replay_call`), or None."""
        return self._failed_batch

    def detach(self) -> None:
        """Give the model back its own `train_step` and its optimizers their `apply`.

        A guard left on an optimizer that no callback reads could close its latch
        and silently skip every later update.
        """
        if self._own_train_step:
            self.model.train_step = self.original_train_step
        else:
            self.model.__dict__.pop("train_step", None)
        self.model.__dict__.pop("_gradient_doctor_model_hook", None)
        for optimizer in self.guarded:
            unguard_optimizer(optimizer)
        self.model.make_train_function(force=True)


def _optimizers_of(model) -> list:
    """The model's optimizer plus optimizers held as attributes (a GAN's two)."""
    found = [model.optimizer] if getattr(model, "optimizer", None) is not None else []
    import keras

    for value in vars(model).values():
        if isinstance(value, keras.optimizers.Optimizer) and value not in found:
            found.append(value)
    return found


def attach(model, watcher) -> ModelHook:
    """The model's hook for `watcher`, made on first use and kept on the model."""
    hook = getattr(model, "_gradient_doctor_model_hook", None)
    if hook is None or hook.watcher is not watcher:
        watcher.model_seen(model)
        hook = ModelHook(model, watcher)
        model._gradient_doctor_model_hook = hook
    else:
        hook.refresh()
    return hook
