"""Run a traced eager step again: its forward exactly as it ran, its backward afresh.

The replay of a step the doctor can call (`replay.replay_step`) runs the user's
function again. An inline eager step (`eager_trace`) has no function, but its trace
holds every op it ran with the very tensors it read and wrote. Run again under the
replay's recorder, each traced op is not executed a second time: its recorded
outputs are handed to fresh tapes opened, watched and closed where the user's were
(`record_gradient`, as TensorFlow's eager executor does), and to the recorder as the
op's event, at the user's line and Keras layer noted when it ran. Each
`tape.gradient` then runs for real on those tapes, so the recorder sees the backward
pass op by op, and the update receives the gradients it computed.

So the forward values are the failing step's own, bit for bit, including its random
draws: a dropout mask or `tf.random.normal` noise is the recorded tensor, not a new
draw; nothing is drawn again and no variable is read or written again except the
trained ones, whose update was skipped. Only ops that consume a recomputed gradient
(clipping written by hand, a gradient penalty) are executed again, on the
recomputed values.
"""

from __future__ import annotations

import dataclasses
from types import FrameType

import numpy as np
import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import (
    context,
    execute,
    op_def_registry,
    record,
    tape_flags,
)
from gradient_doctor.tf_adapter.hooks.eager_trace import (
    CustomGradient,
    EagerTrace,
    GradientTaken,
    TapeClosed,
    TapeOpened,
    TapeWatched,
    TracedOp,
)
from gradient_doctor.tf_adapter.localize import step_context
from gradient_doctor.tf_adapter.localize.input_scan import named_leaves
from gradient_doctor.tf_adapter.localize.step_context import StepCall

# Ops that read a variable: the replay tapes watch the variable there, as a tape
# watches a trainable variable when the step reads it.
_VARIABLE_READS = frozenset({"ReadVariableOp", "ResourceGather", "ResourceGatherNd"})
# Ops that hand the step its batch (`next(iterator)` of a `tf.data` pipeline inside the
# tape): their outputs are the step's input data, as a step function's arguments are.
_DATA_SOURCES = frozenset({"IteratorGetNext", "IteratorGetNextSync", "OptionalGetValue"})


def traced_step(
    trace: EagerTrace, grads, variables, frame: FrameType | None, loss=None
) -> tuple[StepCall | None, list[tuple[str, object]]]:
    """How to run the traced step again for the replay, and its inputs named.

    Args:
        trace: the step's trace, closed at its update.
        grads: the gradients handed to the update.
        variables: the variables they update.
        frame: the user's frame that made the update (its names name the inputs).
        loss: for a step that made no update (the script stopped on this loss, not
            finite, before any `tape.gradient`), that loss; `grads` is then empty.

    Returns:
        (call, named_inputs); call is None when `grads` (or `loss`) were not computed
        inside the trace (the update is not the traced step's).
    """
    grads = list(grads)
    made = grads or ([loss] if loss is not None else [])
    if not made or not trace.produced(made):
        return None, []
    named = step_inputs(trace, frame)
    rerun = TracedStepRerun(trace, grads, list(variables), loss)
    # The inputs ride along as the call's arguments: the replay counts them as the
    # step's batch (the rerun itself finds them in the trace).
    return StepCall(rerun, tuple(tensor for _, tensor in named)), named


class TracedStepRerun:
    """Runs a trace again under the current replay recorder (see the module docstring).

    Args:
        trace: the step's trace.
        grads: the gradients the step handed to its update.
        variables: the variables they update.
        loss: the loss a step that made no update stopped on, or None.
    """

    def __init__(self, trace: EagerTrace, grads: list, variables: list, loss=None) -> None:
        self._trace = trace
        self._grads = grads
        self._variables = variables
        self._loss = loss

    def __call__(self, *inputs) -> list:
        """Run the step again; `inputs` (its batch) are already in the trace.

        Returns:
            The recomputed gradients of the update, in the order of `grads`; they
            also go to the replay recorder as the step's update.

        Raises:
            NotImplementedError: called while a graph is traced (a crash dump): the
                trace holds eager tensors, not a graph of the step.
        """
        if not tf.executing_eagerly():
            raise NotImplementedError(
                "an eager step written inline (no step function) is kept as the trace of "
                "its eager ops, which cannot be made into a graph for a crash dump"
            )
        run = _Run(_watched_variables(self._trace))
        try:
            for entry in self._trace.entries:
                run.replay(entry)
        finally:
            run.close_tapes()
        grads = [run.mapped(g) for g in self._grads]
        recorder = step_context.current_recorder()
        if recorder is not None and self._loss is not None:
            recorder.note_loss(run.mapped(self._loss))
        elif recorder is not None:
            recorder.record_gradients(grads, self._variables)
        return grads


class _Run:
    """The state of one rerun: the replay tapes, and the tensors recomputed so far."""

    def __init__(self, watched_handles: set[int]) -> None:
        self._watched_handles = watched_handles
        self._tapes: dict[int, tf.GradientTape] = {}  # original tape id -> its replay twin
        self._recomputed: dict[int, object] = {}  # original tensor id -> recomputed tensor
        self._recorder = step_context.current_recorder()

    def mapped(self, structure):
        """`structure` with each tensor replaced by its recomputed value where there is one."""
        if structure is None:
            return None
        if id(structure) in self._recomputed:
            return self._recomputed[id(structure)]
        return tf.nest.map_structure(
            lambda t: self._recomputed.get(id(t), t), structure, expand_composites=True
        )

    def replay(self, entry) -> None:
        if isinstance(entry, TracedOp):
            self._op(entry)
        elif isinstance(entry, TapeOpened):
            twin = tf.GradientTape(
                persistent=entry.persistent,
                watch_accessed_variables=entry.watch_accessed_variables,
            )
            twin.__enter__()
            self._tapes[id(entry.tape)] = twin
        elif isinstance(entry, TapeClosed):
            self._tapes[id(entry.tape)].__exit__(None, None, None)  # a no-op once popped
        elif isinstance(entry, TapeWatched):
            self._tapes[id(entry.tape)].watch(self.mapped(entry.tensors))
        elif isinstance(entry, GradientTaken):
            self._gradient(entry)
        elif isinstance(entry, CustomGradient):
            record.record_operation(
                entry.op_type,
                [self.mapped(t) for t in entry.outputs],
                [self.mapped(t) for t in entry.inputs],
                entry.backward_function,
                entry.forward_function,
            )

    def _gradient(self, entry: GradientTaken) -> None:
        twin = self._tapes[id(entry.tape)]
        result = twin.gradient(
            self.mapped(entry.target),
            self.mapped(entry.sources),
            *self.mapped(entry.args),
            **self.mapped(entry.kwargs),
        )
        for old, new in zip(_leaves(entry.result), _leaves(result)):
            if new is not None:
                self._recomputed[id(old)] = new

    def _op(self, op: TracedOp) -> None:
        if op.op_type in _DATA_SOURCES:
            return  # the batch: an input of the step, not one of its ops
        recomputed = [self._recomputed.get(id(t)) for t in op.inputs]
        if any(t is not None for t in recomputed) and _stateless(op.op_type):
            # Downstream of a recomputed gradient: execute it again on those values.
            inputs = [r if r is not None else t for r, t in zip(recomputed, op.inputs)]
            first = self._event_count()
            outputs = execute.execute(
                op.op_type, len(op.outputs), inputs, op.attrs, context.context()
            )
            if op.taped:
                execute.record_gradient(op.op_type, inputs, op.attrs, outputs)
            for old, new in zip(op.outputs, outputs):
                self._recomputed[id(old)] = new
            self._place(first, op)
            return
        if op.op_type in _VARIABLE_READS and id(op.inputs[0]) in self._watched_handles:
            for twin in self._tapes.values():
                if all(tape_flags(twin)[1:]):
                    twin.watch(op.inputs[0])
        if op.taped and op_def_registry.get(op.op_type) is not None:
            execute.record_gradient(op.op_type, list(op.inputs), op.attrs, list(op.outputs))
        if self._recorder is not None:
            first = self._event_count()
            self._recorder.on_op(op.op_type, op.inputs, op.attrs, op.outputs)
            self._place(first, op)

    def _event_count(self) -> int:
        return len(self._recorder.events) if self._recorder is not None else 0

    def _place(self, first: int, op: TracedOp) -> None:
        """Put the op's events at the layer and user's line where the op really ran."""
        if self._recorder is None:
            return
        events = self._recorder.events
        for index in range(first, len(events)):
            event = events[index]
            if event.phase == "forward":
                events[index] = dataclasses.replace(
                    event,
                    layer=op.layer,
                    source=op.source,
                    source_kind=op.source_kind,
                    op_name=f"{op.layer}/{event.op_type}" if op.layer else event.op_type,
                )

    def close_tapes(self) -> None:
        """Exit every replay tape still open (innermost first)."""
        for twin in reversed(list(self._tapes.values())):
            twin.__exit__(None, None, None)


def _leaves(structure) -> list:
    return tf.nest.flatten(structure) + tf.nest.flatten(structure, expand_composites=True)


def _stateless(op_type: str) -> bool:
    op_def = op_def_registry.get(op_type)
    return op_def is not None and not op_def.is_stateful


def _watched_handles_of(structure) -> set[int]:
    handles = set()
    for item in tf.nest.flatten(structure):
        handle = getattr(item, "handle", None)
        if handle is not None:
            handles.add(id(handle))
    return handles


def _watched_variables(trace: EagerTrace) -> set[int]:
    """Ids of the handles of every variable a traced gradient is taken with respect to."""
    handles = set()
    for entry in trace.entries:
        if isinstance(entry, GradientTaken):
            handles |= _watched_handles_of(entry.sources)
        elif isinstance(entry, TapeWatched):
            handles |= _watched_handles_of(entry.tensors)
    return handles


def step_inputs(trace: EagerTrace, frame: FrameType | None) -> list[tuple[str, object]]:
    """The step's data, named as the user's frame names it: each tensor the traced ops
    read that no traced op made (its batch, not its weights), matched to a local of
    the frame holding it (or a NumPy array equal to it)."""
    leaves = _data_leaves(trace)
    if frame is None or not leaves:
        return []
    found, seen = [], set()
    for name, value in list(frame.f_locals.items()):
        if name.startswith("__"):
            continue
        for path, item in _candidates(value, name):
            leaf = _matching_leaf(item, leaves)
            if leaf is not None and id(leaf) not in seen:
                seen.add(id(leaf))
                found.append((path, leaf))
    return found


def _candidates(value, name: str) -> list[tuple[str, object]]:
    """A local's tensors and arrays: itself, or the parts of a small tuple or dict batch."""
    if isinstance(value, tf.Tensor | np.ndarray):
        return [(name, value)]
    if isinstance(value, tuple | list | dict) and len(value) <= 8:
        return [
            (path, item)
            for path, item in named_leaves(value, name)
            if isinstance(item, tf.Tensor | np.ndarray)
        ]
    return []


def _data_leaves(trace: EagerTrace) -> dict[int, tf.Tensor]:
    """The tensors (not handles) the traced ops read but did not make, and the batches
    they took from an iterator, by id."""
    made, leaves = set(), {}
    for entry in trace.entries:
        if isinstance(entry, TracedOp):
            for tensor in entry.inputs:
                if id(tensor) not in made and tensor.dtype not in (tf.resource, tf.variant):
                    leaves.setdefault(id(tensor), tensor)
            if entry.op_type not in _DATA_SOURCES:
                made.update(id(t) for t in entry.outputs)
        elif isinstance(entry, GradientTaken):
            made.update(id(t) for t in _leaves(entry.result))
    return leaves


def _matching_leaf(item, leaves: dict[int, tf.Tensor]) -> tf.Tensor | None:
    if isinstance(item, tf.Tensor):
        return leaves.get(id(item))
    for leaf in leaves.values():  # an array Keras converted inside the step
        if tuple(leaf.shape) == item.shape and leaf.dtype.as_numpy_dtype == item.dtype:
            if np.array_equal(leaf.numpy(), item):
                return leaf
    return None
