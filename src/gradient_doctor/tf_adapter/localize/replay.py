"""Replay one training step eagerly, op by op, recording every op's values."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import tensorflow as tf

from gradient_doctor.core.findings import TensorStats
from gradient_doctor.core.op_trace import OpEvent
from gradient_doctor.core.source_frames import user_line
from gradient_doctor.tf_adapter._tf_internals import op_callbacks, ops, resource_variable_ops
from gradient_doctor.tf_adapter.hooks.creation_sites import op_site
from gradient_doctor.tf_adapter.hooks.numerics_checks import numerics_checks_passed_through
from gradient_doctor.tf_adapter.localize import step_context
from gradient_doctor.tf_adapter.localize.backward_marks import (
    BackwardMarks,
    gradient_functions_marked,
    keras_layer_path,
)
from gradient_doctor.tf_adapter.localize.step_context import StepCall
from gradient_doctor.tf_adapter.step.guard import gradient_values
from gradient_doctor.tf_adapter.step.random_draws import replaying
from gradient_doctor.tf_adapter.step.tensor_summary import summarize

# Ops that only move handles or read variables: no values worth checking.
_SKIPPED_OPS = frozenset({"VarHandleOp", "AssignVariableOp", "NoOp", "DestroyResourceOp"})
_replay_lock = threading.Lock()


@dataclass(frozen=True)
class ReplayResult:
    """What a replayed step did.

    Attributes:
        events: every op executed, in order.
        bad_ids: ids of the non-finite gradients and losses of the first update
            that would have been skipped (empty when the replay stayed finite).
        tensors: the tensors behind every id, kept alive for inspection.
        stats: the summary of every tensor id (None for non-numeric tensors).
        updates: each optimizer update the step asked for, in order:
            (gradients, variables, [(loss, tape window), ...] noted before it).
        exits: tensor id -> the user's line that converted it to NumPy.
        error: an exception the step raised while replaying, if any.
    """

    events: list[OpEvent]
    bad_ids: list[int]
    tensors: dict[int, object]
    stats: dict[int, TensorStats | None]
    updates: list[tuple[list, list, list]]
    error: BaseException | None
    exits: dict[int, object]

    @property
    def reproduced(self) -> bool:
        """True when the replay produced non-finite values again."""
        return bool(self.bad_ids)


def replayed_event(
    index: int,
    op_type: str,
    layer: str | None,
    backward: bool,
    gradient_of: str | None,
    forward_index: int | None,
    input_ids: tuple[int, ...],
    output_ids: tuple[int, ...],
    stats,
    source,
    source_kind: str = "op",
) -> OpEvent:
    """One replayed op as the core reads it, named alike by every replay (the run's and
    a crash dump's): `gradient_tape/` for a backward op, then its layer path and type.

    `stats` maps each tensor id to its summary (None when it was not summarised).
    """
    prefix = "gradient_tape/" if backward else ""
    return OpEvent(
        index=index,
        op_type=op_type,
        op_name=f"{prefix}{layer + '/' if layer else ''}{op_type}",
        layer=layer,
        phase="backward" if backward else "forward",
        gradient_of=gradient_of,
        forward_index=forward_index,
        input_ids=input_ids,
        output_ids=output_ids,
        inputs=tuple(s for i in input_ids if (s := stats[i]) is not None),
        outputs=tuple(s for i in output_ids if (s := stats[i]) is not None),
        source=source,
        source_kind=source_kind,
    )


class _Recorder(BackwardMarks):
    """Op callback, gradient-function wrapper and optimizer stand-in during a replay."""

    def __init__(self, live: bool = False) -> None:
        super().__init__()
        # A live recorder watches a real step (updates go through); otherwise the
        # step is a replay and its updates are only recorded.
        self.live = live
        self.after_update = None
        self.events: list[OpEvent] = []
        self.tensors: dict[int, object] = {}
        self.stats: dict[int, TensorStats | None] = {}
        self.applies: list[tuple[list, list, list]] = []
        self.exits: dict[int, object] = {}  # tensor id -> user line where it left for NumPy
        self.windows: list[tuple | None] = []
        self._forward_by_output: dict[int, int] = {}
        self._forward_by_inputs: dict[tuple, int] = {}

    # -- tensors -----------------------------------------------------------
    def _track(self, tensor) -> int:
        key = id(tensor)
        if key not in self.tensors:
            self.tensors[key] = tensor
            self.stats[key] = summarize(tensor) if hasattr(tensor, "dtype") else None
        return key

    # -- op callback ----------------------------------------------------------
    def on_op(self, op_type, inputs, attrs, outputs, op_name=None, graph=None):
        if isinstance(op_type, bytes):  # ops run by TensorFlow's slow eager path: b"Mean"
            op_type = op_type.decode()
        if graph is not None or op_type in _SKIPPED_OPS:
            return None
        input_ids = tuple(self._track(t) for t in inputs)
        output_ids = tuple(self._track(t) for t in outputs)
        index = len(self.events)
        backward = self.in_backward
        gradient_of, forward_index = self.gradient_of()
        forward = self.events[forward_index] if forward_index is not None else None
        if forward is not None:
            layer, source, source_kind = forward.layer, forward.source, forward.source_kind
        else:
            layer = keras_layer_path()
            source, source_kind = op_site(layer)
        self.events.append(
            replayed_event(
                index,
                op_type,
                layer,
                backward,
                gradient_of,
                forward_index,
                input_ids,
                output_ids,
                self.stats,
                source,
                source_kind,
            )
        )
        if not backward:
            for key in output_ids:
                self._forward_by_output[key] = index
            self._forward_by_inputs[(op_type, input_ids)] = index
        return None

    # -- gradient functions ----------------------------------------------------
    def forward_of(self, op, op_type: str) -> int | None:
        """The index of the replayed forward op a gradient function was called for."""
        for tensor in getattr(op, "outputs", None) or ():
            index = self._forward_by_output.get(id(tensor))
            if index is not None and self.events[index].op_type == op.type:
                return index
        inputs = tuple(id(t) for t in getattr(op, "inputs", None) or ())
        return self._forward_by_inputs.get((op.type, inputs))

    def note_window(self, window) -> None:
        self.windows.append(window)

    # -- optimizer stand-in ------------------------------------------------
    def record_gradients(self, grads, variables) -> None:
        losses = list(zip(self.losses, self.windows))
        self.applies.append((list(grads), list(variables) if variables is not None else [], losses))
        if self.after_update is not None:
            self.after_update()

    def bad_ids(self) -> list[int]:
        """Non-finite gradients (and losses) of the first update that had any."""

        def tracked(tensor) -> tuple[int, TensorStats | None]:
            key = self._track(tensor)
            return key, self.stats[key]

        return first_nonfinite(self.applies, self.losses, tracked)


def first_nonfinite(
    applies: list[tuple[list, list, list]],
    losses: list,
    tracked: Callable[[object], tuple[int, TensorStats | None]],
) -> list[int]:
    """Ids of the non-finite gradients (and losses) of the first update that had any.

    The losses noted before the first such update count with it; without one,
    the non-finite losses noted after the last update.

    Args:
        applies: each update as (gradients, variables, losses noted before it).
        losses: every `tape.gradient` target of the step, in order.
        tracked: a tensor's id and summary (None for a non-numeric tensor).
    """

    def nonfinite(tensors) -> list[int]:
        found = []
        for tensor in tensors:
            key, stats = tracked(tensor)
            if stats is not None and not stats.finite:
                found.append(key)
        return found

    losses_seen = 0
    for grads, _, _ in applies:
        bad = nonfinite(gradient_values(g) for g in grads if g is not None)
        bad += nonfinite(losses[losses_seen:])
        losses_seen = len(losses)
        if bad:
            return bad
    return nonfinite(losses[losses_seen:])


@contextmanager
def _watch_numpy_exits(recorder: _Recorder) -> Iterator[None]:
    """Note where the step converts a tensor to NumPy (the tape cannot follow it there)."""
    cls = ops._EagerTensorBase
    originals = {name: cls.__dict__[name] for name in ("numpy", "__array__")}

    def make(original):
        def convert(self, *args, **kwargs):
            recorder.exits.setdefault(id(self), user_line())
            return original(self, *args, **kwargs)

        return convert

    for name, original in originals.items():
        setattr(cls, name, make(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(cls, name, original)


_WRITE_METHODS = ("assign", "assign_add", "assign_sub")


def _resource_variable_classes() -> list[type]:
    """`BaseResourceVariable` and every subclass (each may define its own `assign`)."""
    found, pending = [], [resource_variable_ops.BaseResourceVariable]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


@contextmanager
def _snapshot_variable_writes() -> Iterator[dict]:
    """Undo every variable write the replay makes (BatchNorm statistics, metrics, seeds).

    Yields the variables written so far, as {id: (variable, value before)}.
    """
    saved: dict[int, tuple[object, object]] = {}
    patched = [
        (cls, name, cls.__dict__[name])
        for cls in _resource_variable_classes()
        for name in _WRITE_METHODS
        if name in cls.__dict__
    ]

    def make(original):
        def write(self, *args, **kwargs):
            if id(self) not in saved:
                saved[id(self)] = (self, tf.identity(self.read_value()))
            return original(self, *args, **kwargs)

        return write

    for cls, name, original in patched:
        setattr(cls, name, make(original))
    try:
        yield saved
    finally:
        for cls, name, original in patched:
            setattr(cls, name, original)
        for variable, value in saved.values():
            variable.assign(value)


@contextmanager
def _instrumented(recorder: _Recorder) -> Iterator[None]:
    """Record every op while the block runs, with every tf.function run eagerly."""
    was_eager = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)
    op_callbacks.add_op_callback(recorder.on_op)
    try:
        with (
            gradient_functions_marked(recorder),
            step_context.recording(recorder),
            _watch_numpy_exits(recorder),
            numerics_checks_passed_through(),
        ):
            yield
    finally:
        op_callbacks.remove_op_callback(recorder.on_op)
        tf.config.run_functions_eagerly(was_eager)


def replay_step(call: StepCall, ran: bool = True) -> ReplayResult:
    """Run `call` once more, eagerly, recording every op; no variable keeps a change.

    Optimizer updates are not applied: the guard hands their gradients to the
    recorder instead. Variables the step writes (BatchNorm moving statistics,
    metric totals, RNG seeds) are restored afterwards.

    The failing step already advanced the integer state it keeps (Keras's
    `SeedGenerator` counters), so a first pass measures by how much, and the
    replay runs again from that state rewound: the same dropout masks and
    random draws as the step that failed.

    Args:
        call: the step and its batch.
        ran: bool, the step already ran from the state the variables hold (the
            failing step), so its integer state is stepped back; False for a step
            still to run from it. Defaults to True.
    """
    with _replay_lock:
        result, advanced = _replay_once(call, {})
        if advanced and ran:
            result, _ = _replay_once(call, advanced)
    return result


def _replay_once(call: StepCall, rewind: dict) -> tuple[ReplayResult, dict]:
    """One recorded pass, after stepping the variables in `rewind` back by their deltas.

    Returns the result and, for each integer variable the pass advanced, by how much.
    """
    recorder = _Recorder()
    error = None
    with _snapshot_variable_writes() as saved:
        for variable, delta in rewind.values():
            variable.assign(variable.read_value() - delta)
        with _instrumented(recorder), replaying(call.draws):
            try:
                call.fn(*call.args, **call.kwargs)
            except Exception as exc:  # the user's step may raise on the bad values it sees
                error = exc
        advanced = {}
        for key, (variable, before) in saved.items():
            if variable.dtype.is_integer and key not in rewind:
                delta = variable.read_value() - before
                if bool(tf.reduce_any(delta != 0)):
                    advanced[key] = (variable, delta)
    return _result(recorder, error), advanced


def _result(recorder: _Recorder, error: BaseException | None) -> ReplayResult:
    return ReplayResult(
        recorder.events,
        recorder.bad_ids(),
        recorder.tensors,
        recorder.stats,
        recorder.applies,
        error,
        recorder.exits,
    )


class LiveRecording:
    """Record the next real step as it runs, for loops that cannot be run again.

    `start` is called when the next step begins (its tape opens); recording ends
    at that step's first optimizer update, which goes through as usual, and
    `on_done` receives the `ReplayResult`.
    """

    def __init__(self, on_done) -> None:
        self._recorder = _Recorder(live=True)
        self._recorder.after_update = self._finish
        self._stack = ExitStack()
        self._on_done = on_done

    def start(self) -> None:
        self._stack.enter_context(_instrumented(self._recorder))

    def _finish(self) -> None:
        self._recorder.after_update = None
        self._stack.close()
        self._on_done(_result(self._recorder, None))
