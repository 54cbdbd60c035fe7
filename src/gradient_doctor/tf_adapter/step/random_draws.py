"""Keep the failing step's draws of stateful random ops, so that its replay draws the same.

`tf.random.normal`, `tf.random.uniform`, `tf.nn.dropout` and their kin run kernels
that keep their own hidden state: a replay of the step draws other numbers, and a
step that failed on one unlucky draw (a GAN's noise, a dropout mask) may then stay
finite and name no op. Keras's seeded ops (`keras.random.*`, `Dropout`) are
stateless with a seed variable, which the replay rewinds instead.

While the step is traced, the outputs of its stateful random ops are found in the
graph, in creation order; they are copied into variables only in the guard's
failure branch (the happy path copies nothing). The replay then hands the k-th
random call of the step the k-th kept draw, when its op and dtype match.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import gen_random_ops
from gradient_doctor.tf_adapter.step.batch_stash import BatchStash
from gradient_doctor.tf_adapter.step.xla_branches import compiled_with_xla

# Stateful random op type -> the `gen_random_ops` function that creates it.
_DRAWING = {
    "RandomStandardNormal": "random_standard_normal",
    "RandomUniform": "random_uniform",
    "RandomUniformInt": "random_uniform_int",
    "TruncatedNormal": "truncated_normal",
    "ParameterizedTruncatedNormal": "parameterized_truncated_normal",
    "Multinomial": "multinomial",
    "RandomShuffle": "random_shuffle",
    "RandomGamma": "random_gamma",
    "RandomPoissonV2": "random_poisson_v2",
}


class RandomDraws:
    """The stateful random draws of one watched step, kept when the guard trips.

    A step with several optimizer updates (a GAN's two) is guarded at each; each
    guard site keeps the draws made before it, in a stash of its own.
    """

    def __init__(self) -> None:
        self._sites: dict[tuple[str, ...], tuple[list[str], BatchStash]] = {}

    def assign_ops(self, ops: list) -> list:
        """Ops that copy the outputs of `ops` (from `drawing_ops`) into this site's stash."""
        if not ops:
            return []
        key = tuple(op.name for op in ops)
        if key not in self._sites:
            # XLA cannot change a variable's shape: keep static shapes there.
            stash = BatchStash(fixed_shapes=compiled_with_xla())
            self._sites[key] = ([op.type for op in ops], stash)
        _, stash = self._sites[key]
        return stash.assign_ops([op.outputs[0] for op in ops])

    def restore(self, replica: int = 0) -> list[tuple[str, tf.Tensor]] | None:
        """The kept draws as (op type, value) in the order the step made them, or None."""
        found = None
        for types, stash in self._sites.values():
            values = stash.restore(replica)
            if values is not None and found is None:
                found = list(zip(types, values, strict=True))
        return found


def drawing_ops(graph) -> list:
    """The stateful random ops made so far in `graph` (the step being traced), in order."""
    return [op for op in graph.get_operations() if op.type in _DRAWING]


@contextmanager
def replaying(draws: list[tuple[str, tf.Tensor]] | None) -> Iterator[None]:
    """While the block runs, the step's stateful random calls return `draws` in order.

    Each call still draws (so the trace records its op); the kept value replaces
    the fresh one when the op type, dtype and shape agree. A call that differs ends
    the substitution: from there on the calls draw afresh, as without it.
    """
    if not draws:
        yield
        return
    pending = list(draws)
    originals = {name: getattr(gen_random_ops, name) for name in set(_DRAWING.values())}

    def drawing(op_type: str, original):
        def draw(*args, **kwargs):
            fresh = original(*args, **kwargs)
            if pending and pending[0][0] == op_type:
                _, value = pending[0]
                if value.dtype == fresh.dtype and value.shape == fresh.shape:
                    pending.pop(0)
                    return tf.identity(value)
            pending.clear()  # out of step with the failing run: draw afresh from here
            return fresh

        return draw

    for op_type, name in _DRAWING.items():
        setattr(gen_random_ops, name, drawing(op_type, originals[name]))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(gen_random_ops, name, original)
