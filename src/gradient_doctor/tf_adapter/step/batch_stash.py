"""Keep the failing step's batch in variables, written only when the guard trips."""

from __future__ import annotations

import tensorflow as tf

from gradient_doctor.tf_adapter.step.doctor_variables import doctor_variable, replica_values
from gradient_doctor.tf_adapter.step.replicas import replica_copies


class BatchStash:
    """One shape-free variable per tensor of a batch structure.

    The variables are created while the step is first traced (the only time a
    `tf.function` allows it) and written only in the guard's failure branch, so
    the happy path never copies the batch.
    """

    def __init__(self, fixed_shapes: bool = False) -> None:
        # XLA cannot change a variable's shape: there the stash takes the batch's
        # static shape (a batch of another shape, like a last partial one, is not kept).
        self._fixed_shapes = fixed_shapes
        self._structure = None
        self._kept: tf.Variable | None = None
        self._variables: list[tf.Variable] | None = None
        self.unavailable_reason: str | None = None

    def assign_ops(self, batch) -> list:
        """Ops that copy `batch` into the stash (empty when it cannot be kept)."""
        leaves = [t for t in tf.nest.flatten(batch) if t is not None]
        if not all(isinstance(t, tf.Tensor) for t in leaves):
            self.unavailable_reason = "the batch holds ragged, sparse or non-tensor values"
            return []
        if self._fixed_shapes and not all(t.shape.is_fully_defined() for t in leaves):
            # A shape-free variable would have to change shape inside XLA, which fails
            # the user's step: keep nothing instead.
            self.unavailable_reason = (
                "under XLA (jit_compile=True) only a batch of static shape can be kept, and "
                "this batch's shape is known only when it runs; batch a tf.data dataset with "
                "drop_remainder=True to have the failing batch kept"
            )
            return []
        if self._variables is None:
            try:
                with tf.init_scope():
                    self._variables = [self._variable_for(t) for t in leaves]
                    self._kept = doctor_variable(False, "gradient_doctor_kept")
            except ValueError as error:  # a retrace may not create variables
                self.unavailable_reason = str(error).splitlines()[0]
                return []
            self._structure = batch
        if len(leaves) != len(self._variables) or any(
            v.dtype != t.dtype or not v.shape.is_compatible_with(t.shape)
            for v, t in zip(self._variables, leaves)
        ):
            self.unavailable_reason = "the batch structure or shape changed between steps"
            return []
        return [v.assign(t) for v, t in zip(self._variables, leaves)] + [self._kept.assign(True)]

    def _variable_for(self, leaf) -> tf.Variable:
        if self._fixed_shapes and leaf.shape.is_fully_defined():
            return doctor_variable(tf.zeros(leaf.shape, leaf.dtype), "gradient_doctor_batch")
        return doctor_variable(
            tf.zeros([0], leaf.dtype),
            "gradient_doctor_batch",
            shape=tf.TensorShape(None),
        )

    def restore(self, replica: int = 0):
        """The kept batch, as concrete tensors in the original structure, or None.

        Args:
            replica: under a `tf.distribute` strategy, the replica whose shard of
                the batch to return (the one that failed, by its index in the sync
                group; on another worker, it is sent from there: every worker must
                then call this together); 0 otherwise.

        None when no batch was kept since the last restore (the failing step ran
        in a trace that could not keep it).
        """
        if self._variables is None:
            if self.unavailable_reason is None:
                self.unavailable_reason = "the failing step did not keep it"
            return None
        copies = replica_copies([self._kept, *self._variables], replica)
        if copies is None or not bool(copies[0].numpy()):
            if self.unavailable_reason is None:
                self.unavailable_reason = (
                    "its dtypes cannot be sent between workers"
                    if copies is None
                    else "the failing step did not keep it"
                )
            return None
        for flag in replica_values(self._kept):
            flag.assign(False)
        values = iter([tf.identity(copy) for copy in copies[1:]])
        leaves = [None if t is None else next(values) for t in tf.nest.flatten(self._structure)]
        return tf.nest.pack_sequence_as(self._structure, leaves)
