"""A custom loop's `strategy.run`: the function each replica runs is the step kept and replayed.

In a custom loop under `tf.distribute` the watched step is the user's `tf.function`,
but the update is made inside the function it hands to `strategy.run`, once per
replica, each in a thread of its own (where the step's scope, kept per thread, is
not seen). While a watched step runs, that function is wrapped: each replica
enters a scope of its own, keeps its own arguments (its shard of the batch) when
the guard trips, as `fit`'s `train_step` does, and the replay runs the function on
the failing replica's shard, outside the strategy.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import StrategyBase, ag_ctx, autograph
from gradient_doctor.tf_adapter.localize import step_context
from gradient_doctor.tf_adapter.localize.step_context import StepCall, StepScope, step_scope
from gradient_doctor.tf_adapter.step.batch_stash import BatchStash
from gradient_doctor.tf_adapter.step.random_draws import RandomDraws


class ReplicaSteps:
    """The replica function of one watched step function, with its kept shards and draws."""

    def __init__(self) -> None:
        self.fn = None  # the function given to `strategy.run` that made the update
        self.stash = BatchStash()
        self.draws = RandomDraws()
        self._kept = None

    def replay_call(self, replica: int) -> StepCall | None:
        """The replica function, ready to run again on `replica`'s kept shard, or None.

        Under a multi-worker strategy every worker must call this after the same
        failing step: the shard is sent from the worker that holds it.
        """
        kept = self.stash.restore(replica)
        draws = self.draws.restore(replica)
        if kept is None:
            return None
        self._kept = kept
        args, kwargs = kept
        return StepCall(self.fn, tuple(args), dict(kwargs), traceable=self.fn, draws=draws)

    def kept_arguments(self) -> tuple[tuple, dict]:
        """The (args, kwargs) of the last `replay_call` (empty before one)."""
        if self._kept is None:
            return (), {}
        args, kwargs = self._kept
        return tuple(args), dict(kwargs)


@contextmanager
def watching_replicas(steps: ReplicaSteps, outer: StepScope) -> Iterator[None]:
    """While the block runs, `strategy.run` called directly in `outer` runs watched replicas.

    Only calls made while `outer` is the current scope (the step's own code, while
    it is traced) are wrapped; the guard's update inside a `merge_call` and any
    strategy work of the doctor's are not.
    """
    original = StrategyBase.run

    def run(strategy, fn, args=(), kwargs=None, options=None):
        if step_context.current_scope() is not outer:
            return original(strategy, fn, args, kwargs, options)
        # `run` would convert `fn` with AutoGraph as its caller is converted; the
        # wrapper is left alone and converts `fn` the same way itself.
        converted = autograph.tf_convert(fn, ag_ctx.control_status_ctx(), convert_by_default=False)

        @tf.autograph.experimental.do_not_convert
        def replica_fn(*replica_args, **replica_kwargs):
            scope = StepScope(
                batch=(replica_args, replica_kwargs),
                stash=steps.stash,
                draws=steps.draws,
                call=StepCall(fn, replica_args, replica_kwargs),
            )
            with step_scope(scope):
                result = converted(*replica_args, **replica_kwargs)
            if scope.applied:
                steps.fn = fn
                outer.applied = True
            return result

        return original(strategy, replica_fn, args, kwargs, options)

    StrategyBase.run = run
    try:
        yield
    finally:
        StrategyBase.run = original
