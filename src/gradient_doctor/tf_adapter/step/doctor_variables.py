"""The doctor's own variables: never trained, written from inside the user's step.

Under a `tf.distribute` strategy a variable made in its scope is mirrored on every
replica, and a mirrored variable is written from a replica only through a `merge_call`,
which TensorFlow forbids inside the guard's `cond` branches. The doctor's variables are
therefore kept per replica (`ON_READ`): each replica writes its own copy, a read from
outside the replicas gives the first replica's (`ONLY_FIRST_REPLICA`), and the batch
stash's copies give the shard of the replica that failed. Without a strategy these
settings change nothing.
"""

from __future__ import annotations

import tensorflow as tf

# Every variable of the doctor's is named with this prefix (never copied in a snapshot).
DOCTOR_PREFIX = "gradient_doctor"


def doctor_variable(initial, name: str, shape=None) -> tf.Variable:
    """A non-trainable variable of the doctor's, safe to write from a replica."""
    return tf.Variable(
        initial,
        shape=shape,
        trainable=False,
        name=name,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )


def replica_values(variable) -> list:
    """Each replica's copy of a per-replica variable (the variable alone without a strategy)."""
    return list(getattr(variable, "values", None) or [variable])
