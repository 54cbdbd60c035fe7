"""Watching custom training loops: a step wrapper, shared by `watch()` and `run`."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import tensorflow as tf

from gradient_doctor.errors import TrainingStopped
from gradient_doctor.tf_adapter.hooks.numerics_checks import (
    numerics_checks_passed_through,
    stopped_by_numerics_check,
)
from gradient_doctor.tf_adapter.localize import step_context
from gradient_doctor.tf_adapter.localize.input_scan import named_leaves
from gradient_doctor.tf_adapter.localize.replica_steps import ReplicaSteps, watching_replicas
from gradient_doctor.tf_adapter.localize.step_context import StepCall, StepScope, step_scope
from gradient_doctor.tf_adapter.step.random_draws import RandomDraws

# The attribute that holds a watched step's kept random draws (one per step function).
_DRAWS = "_gradient_doctor_draws"
# ... and its `strategy.run` replica function with their kept shards (under tf.distribute).
_REPLICAS = "_gradient_doctor_replicas"


def argument_names(fn: Callable, args: tuple, kwargs: dict) -> list[tuple[str, object]]:
    """The step's arguments named as in its signature (x, y, ...), flattened."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        items = list(bound.arguments.items())
    except (TypeError, ValueError):
        items = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    return [pair for name, value in items for pair in named_leaves(value, name)]


def call_watched_step(
    watcher,
    fn: Callable,
    args: tuple,
    kwargs: dict,
    marker: object,
    signature_of=None,
    traceable=None,
):
    """Run one step of a custom loop under the guard, then check it.

    `marker` is any object that remembers (as an attribute) whether tracing
    `fn` ever reached an optimizer update: only such calls count as steps.
    `signature_of` names the arguments when `fn` itself has no useful signature.
    `traceable` is the step's Python function when `fn` is a `tf.function` only
    reachable through a wrapper (fix trials trace it again).

    Raises:
        TrainingStopped: the step was not finite and `watcher.stop_on_problem`.
    """
    if step_context.current_recorder() is not None or not tf.executing_eagerly():
        return fn(*args, **kwargs)  # a replay, or a call traced inside another step
    draws = getattr(marker, _DRAWS, None)
    if draws is None:
        draws = RandomDraws()
        setattr(marker, _DRAWS, draws)
    replicas = getattr(marker, _REPLICAS, None)
    if replicas is None:
        replicas = ReplicaSteps()
        setattr(marker, _REPLICAS, replicas)
    scope = StepScope(call=StepCall(fn, args, kwargs), draws=draws)
    with step_scope(scope), watching_replicas(replicas, scope):
        watcher.before_step()
        try:
            result = fn(*args, **kwargs)
        except tf.errors.InvalidArgumentError as error:
            updates = scope.applied or getattr(marker, "_gradient_doctor_updates", False)
            if updates and replicas.fn is None and stopped_by_numerics_check(error):
                _stopped_by_own_check(watcher, fn, args, kwargs, draws, signature_of, traceable)
            raise  # the script's own error, after the step it stopped was diagnosed
    if scope.applied:
        marker._gradient_doctor_updates = True
    if not getattr(marker, "_gradient_doctor_updates", False):
        return result
    traceable = getattr(fn, "python_function", None) or traceable
    watcher.compiled_by = traceable
    if replicas.fn is not None:  # under tf.distribute: the failing replica's function

        def replay_call():
            return replicas.replay_call(watcher.guard.read().replica)

        def named():
            return argument_names(replicas.fn, *replicas.kept_arguments())
    else:

        def replay_call():
            return StepCall(fn, args, kwargs, traceable, draws=draws.restore())

        def named():
            return argument_names(signature_of or fn, args, kwargs)

    finding = watcher.after_step(replay_call, named, batch=(args, kwargs, traceable))
    if finding is not None and watcher.stop_on_problem:
        raise TrainingStopped(finding)
    return result


def _stopped_by_own_check(watcher, fn, args, kwargs, draws, signature_of, traceable) -> None:
    """The step's own numerics check raised (`tf.debugging.check_numerics` on a NaN):
    the guard never read it, so it is diagnosed here, as a step that made no update.

    The check is in the step's compiled graph, where it would stop the replay and the
    fix trials at the same values: they run a function traced afresh from the step's
    Python function while the checks hand their tensor on
    (`numerics_checks_passed_through`), so that the guard reads the step instead."""
    traceable = getattr(fn, "python_function", None) or traceable
    if traceable is None:
        return
    watcher.compiled_by = traceable
    unchecked = tf.function(traceable)

    def replay_call():
        return StepCall(unchecked, args, kwargs, traceable, draws=draws.restore())

    def named():
        return argument_names(signature_of or fn, args, kwargs)

    with numerics_checks_passed_through():
        watcher.stopped_by_own_check(replay_call, named)


class WatchedStep:
    """A training step function watched by the doctor (see `gradient_doctor.watch`)."""

    def __init__(self, fn: Callable, watcher) -> None:
        self._fn = fn
        self.watcher = watcher
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", "step")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args, **kwargs):
        return call_watched_step(self.watcher, self._fn, args, kwargs, self)

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        method = self._fn.__get__(instance, owner)

        def bound_step(*args, **kwargs):
            return call_watched_step(self.watcher, method, args, kwargs, self)

        return bound_step

    def report(self, script: str | None = None):
        """What the doctor found so far."""
        return self.watcher.report(script)
