"""Trace one training step into a graph that runs without the user's code, noting each op's origin.

The step is traced as a `tf.function` at the failing batch's exact signature,
with the doctor's replay conventions: optimizer updates are not part of it (the
guard hands their gradients to the recorder instead, as in the run's own
replay), and every `tf.function` the step calls is traced inline, so each of its
ops is a node of one graph that can be fetched. While the graph is built, each op
is noted with the Keras layer active when it was created, whether it was made by
`tape.gradient` (and, for a gradient op, which forward op it differentiates);
the user's source line comes from the op's creation stack afterwards.
"""

from __future__ import annotations

import linecache
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.source_frames import display_path, is_user_file
from gradient_doctor.tf_adapter._tf_internals import (
    BaseOptimizer,
    ag_ctx,
    autograph,
    converter,
    op_callbacks,
)
from gradient_doctor.tf_adapter.hooks.creation_sites import LAYER_CREATION, op_site
from gradient_doctor.tf_adapter.localize import step_context
from gradient_doctor.tf_adapter.localize.backward_marks import (
    BackwardMarks,
    gradient_functions_marked,
    keras_layer_path,
)
from gradient_doctor.tf_adapter.localize.missing_gradients import variable_name
from gradient_doctor.tf_adapter.localize.step_context import StepCall
from gradient_doctor.tf_adapter.step.guard import gradient_values

# Ops that call back into the Python process that built the graph: a graph holding
# one cannot run anywhere else.
PYTHON_CALL_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})


# Ops that hold values rather than compute them (an eager replay never sees them run).
_NOT_COMPUTED = frozenset({"Const", "Placeholder"})


class StepNotTraceable(Exception):
    """The step cannot be turned into a standalone graph (the message says why)."""


@dataclass(frozen=True)
class OpNote:
    """Where one op of the traced step came from.

    Attributes:
        name: the op's node name in the graph.
        op_type: the op's type (e.g. "Exp", "SqrtGrad").
        layer: the Keras layer path active when the op was created, if any.
        phase: "forward", or "backward" for ops made by `tape.gradient`.
        gradient_of: for an op made by a gradient function, the forward op type.
        forward: for such an op, the node name of that forward op.
        source: the user's line that created the op.
    """

    name: str
    op_type: str
    layer: str | None
    phase: str
    gradient_of: str | None
    forward: str | None
    source: SourceLine | None


@dataclass(frozen=True)
class UpdateNote:
    """One optimizer update the step asked for: its gradients' tensor names and variables."""

    gradients: tuple[str | None, ...]
    variables: tuple[str, ...]


@dataclass(frozen=True)
class TracedStep:
    """The step as a graph, with what is needed to run it again and read it.

    Attributes:
        graph: the traced `FuncGraph` (its `as_graph_def()` is self-contained).
        ops: a note for every op that computes values, in creation order.
        updates: the optimizer updates the step asked for, in order.
        losses: the tensor names of every `tape.gradient` target, in order.
        batch: (placeholder name, value, readable name) for each tensor argument.
        variables: (placeholder name, variable) for each variable the step reads
            or writes.
        constants: (placeholder name, value) for each outside tensor the step
            closes over.
        optimizers: the optimizers whose updates the step asked for.
    """

    graph: object
    ops: tuple[OpNote, ...]
    updates: tuple[UpdateNote, ...]
    losses: tuple[str, ...]
    batch: tuple[tuple[str, np.ndarray, str], ...]
    variables: tuple[tuple[str, object], ...]
    constants: tuple[tuple[str, np.ndarray], ...]
    optimizers: tuple[object, ...]


class _TraceRecorder(BackwardMarks):
    """Op callback, gradient-function wrapper and optimizer stand-in while the step is traced.

    It answers to the same calls as the replay's recorder (the guard hands it the
    gradients, the tape hook its targets), so the graph holds the step exactly as
    the run's replay ran it.
    """

    live = False  # updates are recorded, never applied

    def __init__(self) -> None:
        super().__init__()
        # (graph, op name, op type, layer, backward, gradient_of, forward, creation line)
        # per op, in creation order; the tape hook measures positions by its length. The
        # creation line is that of the library layer whose own code made the op, if any.
        self.events: list[tuple] = []
        self.updates: list[UpdateNote] = []
        self.optimizers: list[object] = []

    def on_op(self, op_type, inputs, attrs, outputs, op_name=None, graph=None):
        if graph is None or not outputs or op_type in _NOT_COMPUTED:
            return None
        name = outputs[0].op.name
        gradient_of, forward = self.gradient_of()
        layer = keras_layer_path()
        site, kind = op_site(layer)
        created = site if kind == LAYER_CREATION else None
        self.events.append(
            (graph, name, op_type, layer, self.in_backward, gradient_of, forward, created)
        )
        return None

    def forward_of(self, op, op_type: str) -> str | None:
        """The name of the forward graph op a gradient function was called for."""
        return _forward_name(op, op_type)

    def record_gradients(self, grads, variables) -> None:
        names = tuple(None if g is None else gradient_values(g).name for g in grads)
        self.updates.append(UpdateNote(names, tuple(variable_name(v) for v in variables or ())))


def _forward_name(op, op_type: str) -> str | None:
    """The forward graph op a gradient function was called for (it gets a stand-in)."""
    for tensor in getattr(op, "outputs", None) or ():
        producer = getattr(tensor, "op", None)
        if producer is not None and producer.type == op_type:
            return producer.name
    inputs = [t for t in getattr(op, "inputs", None) or () if hasattr(t, "consumers")]
    if not inputs:
        return None
    names = [t.name for t in inputs]
    matches = [
        consumer
        for consumer in inputs[0].consumers()
        if consumer.type == op_type and [t.name for t in consumer.inputs] == names
    ]
    return matches[-1].name if matches else None


@contextmanager
def _recording(recorder: _TraceRecorder) -> Iterator[None]:
    """Note every op the block creates; inline nested tf.functions; note the optimizers."""
    original_apply_gradients = BaseOptimizer.apply_gradients

    def apply_gradients(optimizer, *args, **kwargs):
        if optimizer not in recorder.optimizers:
            recorder.optimizers.append(optimizer)
        return original_apply_gradients(optimizer, *args, **kwargs)

    was_eager = tf.config.functions_run_eagerly()
    BaseOptimizer.apply_gradients = apply_gradients
    op_callbacks.add_op_callback(recorder.on_op)
    try:
        with gradient_functions_marked(recorder), step_context.recording(recorder):
            yield
    finally:
        op_callbacks.remove_op_callback(recorder.on_op)
        BaseOptimizer.apply_gradients = original_apply_gradients
        tf.config.run_functions_eagerly(was_eager)


def trace_step(call: StepCall, named_inputs: list[tuple[str, object]] = ()) -> TracedStep:
    """Trace `call` at its arguments' exact signature into a standalone graph.

    The step's tensor arguments become the graph's placeholders; every other
    argument (Python numbers, objects) is fixed as it was in this call. The
    Python function is traced as it is first; only when that fails (Python
    control flow on tensors) again converted by AutoGraph, as `tf.function` does.

    Args:
        call: the failing step (its `traceable` function when known, else `fn`).
        named_inputs: readable names for the step's input tensors (matched by identity).

    Returns:
        A `TracedStep`.

    Raises:
        StepNotTraceable: the step cannot run outside this process (it calls
            Python through `tf.py_function`, or reads a resource that is not a
            variable) or cannot be traced at all.
    """
    function = call.traceable or call.fn
    leaves = tf.nest.flatten((tuple(call.args), dict(call.kwargs)))
    positions = [i for i, leaf in enumerate(leaves) if _is_batch_leaf(leaf)]
    values = [np.asarray(leaves[i]) for i in positions]
    names = {id(tensor): name for name, tensor in named_inputs}
    readable = [names.get(id(leaves[i]), f"input_{n}") for n, i in enumerate(positions)]
    first_error = None
    for converted in (False, True):
        recorder = _TraceRecorder()
        try:
            concrete = _concrete_function(
                function, call, leaves, positions, values, converted, recorder
            )
            break
        except Exception as error:  # the user's step may not trace as it is
            first_error = first_error or error
    else:
        raise StepNotTraceable(
            f"the step could not be traced as a tf.function ({type(first_error).__name__}: "
            f"{first_error})"
        ) from first_error
    graph = concrete.graph
    python_calls = sorted({op.type for op in graph.get_operations() if op.type in PYTHON_CALL_OPS})
    if python_calls:
        raise StepNotTraceable(
            f"the step calls back into Python ({', '.join(python_calls)}: `tf.py_function` or "
            "`tf.numpy_function`), which cannot run outside this process"
        )
    placeholders = [t.name for t in graph.inputs[: len(values)]]
    variables, constants = _captured(graph)
    return TracedStep(
        graph=graph,
        ops=tuple(_notes(recorder, graph)),
        updates=tuple(recorder.updates),
        losses=tuple(t.name for t in recorder.losses if getattr(t, "graph", None) is graph),
        batch=tuple(zip(placeholders, values, readable)),
        variables=tuple(variables),
        constants=tuple(constants),
        optimizers=tuple(recorder.optimizers),
    )


def _is_batch_leaf(leaf) -> bool:
    if isinstance(leaf, tf.Variable) or not isinstance(leaf, tf.Tensor | np.ndarray):
        return False
    return tf.as_dtype(leaf.dtype) != tf.string


def _concrete_function(function, call, leaves, positions, values, converted, recorder):
    options = converter.ConversionOptions(recursive=True, user_requested=False)

    def step(*tensors):
        filled = list(leaves)
        for position, tensor in zip(positions, tensors):
            filled[position] = tensor
        args, kwargs = tf.nest.pack_sequence_as((tuple(call.args), dict(call.kwargs)), filled)
        # Nested tf.functions run their Python here, so their ops join this graph.
        tf.config.run_functions_eagerly(True)
        if converted:
            with ag_ctx.ControlStatusCtx(status=ag_ctx.Status.ENABLED, options=options):
                return autograph.converted_call(function, args, kwargs, options=options)
        return function(*args, **kwargs)

    signature = [
        tf.TensorSpec(value.shape, tf.as_dtype(value.dtype), name=f"batch_{n}")
        for n, value in enumerate(values)
    ]
    with _recording(recorder):
        return tf.function(step, autograph=False).get_concrete_function(*signature)


def _captured(graph) -> tuple[list, list]:
    """The variables and outside tensors the graph closes over, by placeholder name."""
    by_handle = {id(v.handle): v for v in graph.variables}
    variables, constants = [], []
    for external, internal in graph.captures:
        if external.dtype == tf.resource:
            variable = by_handle.get(id(external))
            if variable is None:
                raise StepNotTraceable(
                    f"the step reads a TensorFlow resource that is not a variable "
                    f"({internal.name}: a lookup table, an iterator or a queue), whose "
                    "contents cannot be saved"
                )
            variables.append((internal.name, variable))
        elif external.dtype in (tf.string, tf.variant):
            raise StepNotTraceable(
                f"the step closes over a {external.dtype.name} tensor ({internal.name}), "
                "which cannot be saved without pickling"
            )
        else:
            constants.append((internal.name, np.asarray(external)))
    return variables, constants


def _notes(recorder: _TraceRecorder, graph) -> list[OpNote]:
    """One note per recorded op of the step's own graph, with its user line resolved."""
    sources: dict[str, SourceLine | None] = {}
    layers: dict[str, str | None] = {}
    result = []
    for op_graph, name, op_type, layer, backward, gradient_of, forward, created in recorder.events:
        if op_graph is not graph:
            continue  # an op inside a cond/while branch: not a node of this graph
        source = created or _user_source(graph.get_operation_by_name(name))
        if forward is not None and forward in sources:
            # A gradient op belongs to the line and layer of the op it differentiates.
            source, layer = sources[forward], layers[forward]
        sources[name], layers[name] = source, layer
        result.append(
            OpNote(
                name=name,
                op_type=op_type,
                layer=layer,
                phase="backward" if backward else "forward",
                gradient_of=gradient_of,
                forward=forward,
                source=source,
            )
        )
    return result


def _user_source(op) -> SourceLine | None:
    """The innermost user frame of the op's creation stack (AutoGraph's code mapped back)."""
    for frame in reversed(list(op.traceback)):
        if is_user_file(frame.filename):
            code = linecache.getline(frame.filename, frame.lineno).strip()
            return SourceLine(display_path(frame.filename), frame.lineno, code)
    return None
