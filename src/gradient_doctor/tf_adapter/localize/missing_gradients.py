"""Describe a step's dataflow as neutral nodes, to find where gradient paths break."""

from __future__ import annotations

import dataclasses
import linecache
import re
import sys

import tensorflow as tf

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.gradient_paths import (
    LEFT_FRAMEWORK,
    NOT_WATCHED,
    Node,
    PathBreak,
    find_breaks,
)
from gradient_doctor.core.source_frames import display_path, is_user_file
from gradient_doctor.tf_adapter._tf_internals import gradient_registry, op_id, variable_handle
from gradient_doctor.tf_adapter.hooks import tape_hook
from gradient_doctor.tf_adapter.localize import step_context
from gradient_doctor.tf_adapter.localize.eager_replay import enclosing_step
from gradient_doctor.tf_adapter.localize.replay import LiveRecording, ReplayResult, replay_step
from gradient_doctor.tf_adapter.localize.step_context import StepCall

# Ops that stop gradients although TensorFlow registers a (None) gradient for them.
NO_GRADIENT_OPS = frozenset(
    {
        "ArgMax", "ArgMin", "Round", "Rint", "Floor", "Ceil", "Sign",
        "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
        "LogicalAnd", "LogicalOr", "LogicalNot", "IsFinite", "IsNan", "IsInf",
        "Multinomial", "StatelessMultinomial", "RandomCategorical",
        "StopGradient", "PreventGradient", "PyFunc", "PyFuncStateless",
        "ZerosLike", "OnesLike", "OneHot", "Unique",
    }
)  # fmt: skip
# Ops that read only a tensor's shape: never the place a value's gradient is lost.
SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank", "BroadcastArgs", "ZerosLike", "OnesLike"})


def variable_name(variable) -> str:
    """A variable's readable name: Keras's path, else TensorFlow's name without ':0'; for
    a `tf.Variable` made with no name (TensorFlow calls each "Variable"), the script's
    own global name for it (`W1 = tf.Variable(...)` is "W1") when it has one."""
    name = getattr(variable, "path", None) or variable.name.split(":")[0]
    if _UNNAMED.fullmatch(name):
        return _script_name(variable) or name
    return name


# TensorFlow's name for a variable made with none ("Variable", "Variable_3").
_UNNAMED = re.compile(r"Variable(_\d+)?")


def _script_name(variable) -> str | None:
    """The running script's global name bound to `variable`, or None."""
    namespace = getattr(sys.modules.get("__main__"), "__dict__", {})
    return next((key for key, value in list(namespace.items()) if value is variable), None)


def differentiable(op_type: str, output_dtypes: list) -> bool:
    """Whether gradients can flow through an op with these outputs."""
    if op_type in NO_GRADIENT_OPS or op_type in SHAPE_OPS:
        return False
    if output_dtypes and not any(
        getattr(d, "is_floating", False) or getattr(d, "is_complex", False) for d in output_dtypes
    ):
        return op_type in ("ReadVariableOp", "VarHandleOp")
    try:
        return gradient_registry().lookup(op_type) is not None
    except LookupError:
        return False


def _graph_source(op) -> SourceLine | None:
    for frame in reversed(op.traceback):
        if is_user_file(frame.filename):
            code = linecache.getline(frame.filename, frame.lineno).strip()
            return SourceLine(display_path(frame.filename), frame.lineno, code)
    return None


def _integer_outputs(output_ids, dtypes) -> frozenset[int]:
    """The ids of the outputs of an integer or boolean dtype (they carry no gradient)."""
    return frozenset(
        output
        for output, dtype in zip(output_ids, dtypes, strict=False)
        if dtype.is_integer or dtype.is_bool
    )


def _static_shape(tensor) -> tuple[int | None, ...] | None:
    """A graph tensor's static shape (None where its rank is unknown)."""
    shape = tensor.shape
    return tuple(shape.as_list()) if shape.rank is not None else None


def breaks_in_graph(graph, loss, variables, window) -> list[PathBreak]:
    """Find the breaks while the step is being traced into `graph`."""
    start, end = window or (None, None)
    nodes = []
    for op in graph.get_operations():
        recorded = start is None or end is None or start < op_id(op) <= end
        nodes.append(
            Node(
                index=op_id(op),
                op_type=op.type,
                input_ids=tuple(id(t) for t in op.inputs),
                output_ids=tuple(id(t) for t in op.outputs),
                source=_graph_source(op),
                differentiable=differentiable(op.type, [t.dtype for t in op.outputs]),
                recorded=recorded,
                structural=op.type in SHAPE_OPS,
                output_shapes=tuple(_static_shape(t) for t in op.outputs),
                integer_outputs=_integer_outputs(
                    [id(t) for t in op.outputs], [t.dtype for t in op.outputs]
                ),
            )
        )
    captured = {id(external): internal for external, internal in graph.captures}
    reads = {}
    for variable in variables:
        internal = captured.get(id(variable_handle(variable)))
        reads[variable_name(variable)] = (id(internal),) if internal is not None else ()
    loss_ids = tuple(id(t) for t in tf.nest.flatten(loss) if t is not None)
    return find_breaks(nodes, loss_ids, reads)


def breaks_in_replay(result: ReplayResult, variables, call: StepCall | None) -> list[PathBreak]:
    """Find the breaks in the op trace of a replayed eager step."""
    missing = {id(v) for v in variables}
    # The update they were handed to; when the user's code left them out of every update
    # (their None gradients filtered), the last update's loss, which they did not reach.
    update = next((u for u in result.updates if any(id(v) in missing for v in u[1])), None)
    if update is None and result.updates:
        update = result.updates[-1]
    losses = update[2] if update is not None and update[2] else []
    loss, window = losses[-1] if losses else (None, None)
    start, end = window or (None, None)
    # What ran after the loss was made cannot be on its path (the user's code filling the
    # None gradients in with `tf.zeros_like(v)` reads the variables, and is no exit).
    made = [
        event.index for event in result.events if loss is not None and id(loss) in event.output_ids
    ]
    last = max(made) if made else None
    nodes = [
        Node(
            index=event.index,
            op_type=event.op_type,
            input_ids=event.input_ids,
            output_ids=event.output_ids,
            source=event.source,
            differentiable=differentiable(
                event.op_type, [tf.as_dtype(s.dtype) for s in event.outputs]
            ),
            recorded=start is None or end is None or start <= event.index < end,
            structural=event.op_type in SHAPE_OPS,
            output_shapes=tuple(s.shape for s in event.outputs),
            integer_outputs=_integer_outputs(
                event.output_ids, [tf.as_dtype(s.dtype) for s in event.outputs]
            ),
        )
        for event in result.events
        if event.phase == "forward" and (last is None or event.index <= last)
    ]
    handles = {variable_name(v): id(variable_handle(v)) for v in variables}
    used = {
        i for event in result.events if last is None or event.index <= last for i in event.input_ids
    }
    reads = {name: (key,) if key in used else () for name, key in handles.items()}
    produced = {i for event in result.events for i in event.output_ids}
    outside = {
        key: stats.shape
        for key, stats in result.stats.items()
        if stats is not None
        and key not in produced
        and stats.size > 1
        and stats.dtype.startswith("float")
    }
    loss_ids = (id(loss),) if loss is not None else ()
    return [_at_numpy_exit(b, result.exits) for b in find_breaks(nodes, loss_ids, reads, outside)]


def _at_numpy_exit(path_break: PathBreak, exits: dict) -> PathBreak:
    """Point a break where a value left for NumPy at the `.numpy()` line itself."""
    node = path_break.node
    if path_break.kind != LEFT_FRAMEWORK or node is None:
        return path_break
    line = next((exits[t] for t in node.output_ids if t in exits), None)
    if line is None:
        return path_break
    exit_node = Node(node.index, "numpy", node.output_ids, (), line)
    return PathBreak(path_break.kind, exit_node, path_break.variables, path_break.reentry)


def find_missing_gradient_breaks(variables, loss, tape_window, on_later) -> list[PathBreak] | None:
    """Where the paths to `variables` break, for the update being asked for right now.

    While tracing, the graph under construction is analysed; in eager code the
    current step is replayed (once) and its op trace analysed. A step that
    cannot be run again (the update is in the training loop's own body) is
    recorded the next time it runs instead: then this returns None and
    `on_later(breaks)` is called from that step's update. Each break carries the
    user's `tape.gradient(...)` line that returned None for its variables, when seen.
    """
    site = tape_hook.gradient_call_of(variables)

    def at_call(breaks: list[PathBreak]) -> list[PathBreak]:
        return [dataclasses.replace(b, gradient_call=site) for b in breaks]

    if tape_hook.unwatched(variables):  # no path to look for: the tape recorded none
        names = tuple(variable_name(v) for v in variables)
        return at_call([PathBreak(NOT_WATCHED, None, names)])
    if not tf.executing_eagerly():
        graph = tf.compat.v1.get_default_graph()
        return at_call(breaks_in_graph(graph, loss, variables, tape_window))
    scope = step_context.current_scope()
    call = scope.call if scope is not None and scope.call is not None else None
    if call is None:
        call, _ = enclosing_step(sys._getframe(1))
    if call is None:
        step_context.request_live_recording(
            LiveRecording(
                lambda result: on_later(at_call(breaks_in_replay(result, variables, None)))
            )
        )
        return None
    return at_call(breaks_in_replay(replay_step(call), variables, call))
