"""A small ring of earlier good training states, for fix trials that must start before the trouble.

Every `every` steps, after a finite step, the optimizers' variables and the variables
they train are read (a reference to each buffer, between steps), and a background
thread copies the reads to host memory, off the training thread; the few most recent
copies are kept, and the state training started from is kept for good
(`benchmarks/snapshot_ring.py` measures the cost). A custom loop's latest batches are
kept too (references, within a byte budget), so a trial from an earlier copy runs on
the batches the run saw.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable

import numpy as np
import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import trainable_variables_of
from gradient_doctor.tf_adapter.step.doctor_variables import DOCTOR_PREFIX

# Take a copy every this many steps; keep this many recent ones (plus the first).
DEFAULT_EVERY = 50
DEFAULT_KEEP = 3
# Batches kept for trials, at most this many bytes in all.
BATCH_BUDGET_BYTES = 64 * 2**20


class Snapshot:
    """The training state from which step `step` starts.

    The values are read between steps (a read of a variable is a reference to its
    buffer, which the next update then writes to a copy of), and moved to host memory
    by a background thread, off the training thread.

    Attributes:
        step: the first step run from this state.
    """

    def __init__(self, step: int, variables: Iterable[tf.Variable]) -> None:
        self.step = step
        self._values = _read(variables)
        self._to_host = threading.Thread(target=self._move_to_host, daemon=True)
        self._to_host.start()

    @property
    def values(self) -> list[tuple[tf.Variable, np.ndarray]]:
        """(variable, its value then) for each variable copied, in host memory."""
        self._to_host.join()
        return self._values

    def covers(self, variables: Iterable[tf.Variable]) -> bool:
        """Whether every trainable one of `variables` was copied. A model built by its
        first call (a subclassed model without an `Input`) makes its weights inside
        the first step, after a copy taken before it: restoring that copy would leave
        them as they are now. (An optimizer's slots are not trainable: a trial starts
        them at zero, as the optimizer does.)"""
        copied = {id(variable) for variable, _ in self._values}
        return all(id(variable) in copied for variable, _ in _read(variables) if variable.trainable)

    def _move_to_host(self) -> None:
        self._values = [(variable, np.array(value)) for variable, value in self._values]


class SnapshotRing:
    """Copies of the training state every `every` steps: the first one and the last `keep`.

    Args:
        every: int, steps between copies. Defaults to `DEFAULT_EVERY`.
        keep: int, how many recent copies to keep. Defaults to `DEFAULT_KEEP`.
    """

    def __init__(self, every: int = DEFAULT_EVERY, keep: int = DEFAULT_KEEP) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"`every` must be an int >= 1. Received: every={every!r}")
        self.every = every
        self.first: Snapshot | None = None
        self.recent: deque[Snapshot] = deque(maxlen=keep)
        # (step, (args, kwargs), bytes, the step function) of the latest steps whose loop
        # handed its batch over.
        self._batches: deque[tuple[int, tuple, int, object]] = deque()
        self._batch_bytes = 0
        self._started = False
        self._first_complete = False  # the first copy holds every trained variable

    def before_first_step(self, variables: Callable[[], Iterable[tf.Variable]]) -> None:
        """Copy the state training starts from (once, before the first step runs).

        `variables` returns every variable that exists then; an optimizer's slots are
        made at its first update, so they are not among them (a trial from this copy
        starts them at zero, as the optimizer does).
        """
        if self.first is None and not self._started:
            self._started = True
            found = list(variables())
            if found:
                self.first = Snapshot(0, found)

    def after_finite_step(
        self,
        step: int,
        variables: Callable[[], Iterable[tf.Variable]],
        batch: tuple[tuple, dict] | None = None,
    ) -> None:
        """Note a step that ran finite; copy the state when one is due.

        Args:
            step: the step that just ran (the copy is the state before `step + 1`).
            variables: returns the variables to copy (only called when one is due).
            batch: the step's (args, kwargs) when the loop hands them over, kept
                (as references, within `BATCH_BUDGET_BYTES`) for trials; or (args,
                kwargs, function) when the loop has several step functions to tell
                apart (a GAN's `d_step` and `g_step`).
        """
        self._started = True
        if batch is not None:
            self._keep_batch(step, batch)
        if self.first is not None and not self._first_complete:
            self._first_complete = True
            if not self.first.covers(variables()):  # taken before the model was built
                self.first = None
        if self.first is None or (step + 1) % self.every == 0:
            snapshot = Snapshot(step + 1, variables())
            if self.first is None:
                self.first = snapshot
            else:
                self.recent.append(snapshot)

    def saved(self) -> list[Snapshot]:
        """Every kept copy, oldest first."""
        return ([self.first] if self.first is not None else []) + list(self.recent)

    def at(self, step: int) -> Snapshot | None:
        """The kept copy from which `step` starts, or None."""
        return next((s for s in self.saved() if s.step == step), None)

    def batches_from(
        self, step: int, function: object = None
    ) -> tuple[list[tuple[tuple, dict]], bool]:
        """The kept batches of the steps from `step` on, and whether none is missing.

        None when a step from `step` on ran another step function than `function` (a
        GAN loop's `g_step` between two `d_step`s): a trial runs one function, and the
        other's arguments are not its batches.
        """
        kept = [(s, batch, owner) for s, batch, _, owner in self._batches if s >= step]
        if any(owner is not None and owner is not function for _, _, owner in kept):
            return [], False
        complete = bool(kept) and kept[0][0] == step
        return [batch for _, batch, _ in kept], complete

    def _keep_batch(self, step: int, batch: tuple) -> None:
        owner = batch[2] if len(batch) > 2 else None
        batch = (batch[0], batch[1])
        size = sum(_bytes(t) for t in tf.nest.flatten(batch))
        self._batches.append((step, batch, size, owner))
        self._batch_bytes += size
        while self._batches and self._batch_bytes > BATCH_BUDGET_BYTES:  # oldest go first
            self._batch_bytes -= self._batches.popleft()[2]


def _read(variables: Iterable[tf.Variable]) -> list[tuple[tf.Variable, tf.Tensor]]:
    """Each variable (once) with a read of its value now."""
    seen: set[int] = set()
    reads = []
    for variable in variables:
        handle = getattr(variable, "value", variable)  # a Keras variable wraps a tf.Variable
        inner = handle if isinstance(handle, tf.Variable) else variable
        if id(inner) in seen or not hasattr(inner, "read_value"):
            continue
        seen.add(id(inner))
        reads.append((inner, inner.read_value()))
    return reads


def _bytes(value) -> int:
    nbytes = getattr(value, "nbytes", None)
    if nbytes is None:
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if shape is None or dtype is None:
            return 0
        nbytes = int(np.prod(shape)) * getattr(dtype, "size", 4)
    return int(nbytes)


# A `weakref.proxy` whose object is gone raises ReferenceError at `isinstance`: the
# process may hold one (any library's), so proxies are passed over (a variable itself
# is never one).
_PROXIES = (weakref.ProxyType, weakref.CallableProxyType)


def live_variables() -> list[tf.Variable]:
    """Every variable of the process but the doctor's own (found once, before training)."""
    return [
        obj
        for obj in gc.get_objects()
        if type(obj) not in _PROXIES
        and isinstance(obj, tf.Variable)
        and not obj.name.startswith(DOCTOR_PREFIX)
    ]


def optimizer_state(optimizers: Iterable[weakref.ref]) -> list:
    """The variables of each live optimizer and the variables it trains."""
    found = []
    for ref in optimizers:
        optimizer = ref()
        if optimizer is None:
            continue
        inner = getattr(optimizer, "inner_optimizer", None)
        for opt in (optimizer, inner) if inner is not None else (optimizer,):
            found += trainable_variables_of(opt)
            found += list(getattr(opt, "variables", None) or [])
    return found
