"""Record what a plain eager training step feeds its tapes, from a tape's opening to the update.

An eager training loop written inline (a `for` loop at module level, or in a function
that is the whole loop) has no step function the doctor could call again. So, under
`gradient-doctor run`, while a tape is open in plain eager code (no step the doctor
wraps) every eager op is noted as it runs: its type, attributes, input and output
tensors, Keras layer and the user's line.
So are the tape's own events (opened, closed, `watch`, `tape.gradient`) and every
custom gradient recorded on it (`tf.custom_gradient`, a `tf.function` called eagerly).
The ops of the backward pass are not noted: a replay computes them afresh.

Nothing is copied or summarised on the way: the trace holds references to tensors
the step made anyway, and lets them go once its update has been checked (or, when
several updates may use it, when the next step's first tape opens). Only when the
guard finds an update non-finite is it read (`trace_replay`). Steps that are
functions the doctor calls (`watch()`, `tf.function` steps, `fit`) are not traced:
their replay calls them again.
"""

from __future__ import annotations

import functools
import sys
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import NamedTuple

import tensorflow as tf

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.source_frames import user_frame
from gradient_doctor.tf_adapter._tf_internals import (
    global_state,
    op_callbacks,
    pywrap_tfe,
    record,
    tape_flags,
)
from gradient_doctor.tf_adapter.hooks.creation_sites import op_site
from gradient_doctor.tf_adapter.localize import step_context
from gradient_doctor.tf_adapter.localize.backward_marks import keras_layer_path

# A trace that grows past this many entries without reaching an update is dropped
# (a script that opens tapes and never trains, e.g. saliency maps): the memory it
# would hold is worth more than localizing a step that may never come.
MAX_ENTRIES = 20_000


class TracedOp(NamedTuple):
    """One eager op the step ran, with where it ran (a named tuple: one is made per op,
    and a frozen dataclass costs several times as much to make).

    Attributes:
        op_type: the op's type ("MatMul").
        attrs: its attributes, flattened as TensorFlow executes them (name, value, ...).
        inputs, outputs: the tensors it read and wrote.
        taped: whether a tape could record it (False under `stop_recording`).
        layer: the Keras layer path it ran under, or None.
        source: the line to report for it (`creation_sites.op_site`).
        source_kind: what that line is ("op", or "layer_creation" for an op Keras
            ran inside a library layer).
    """

    op_type: str
    attrs: tuple
    inputs: tuple
    outputs: tuple
    taped: bool
    layer: str | None
    source: SourceLine | None
    source_kind: str


@dataclass(frozen=True)
class TapeOpened:
    """A `tf.GradientTape` entered (its settings, to open one like it)."""

    tape: object
    persistent: bool
    watch_accessed_variables: bool


@dataclass(frozen=True)
class TapeClosed:
    """A traced tape exited."""

    tape: object


@dataclass(frozen=True)
class TapeWatched:
    """`tape.watch(tensors)` on a traced tape."""

    tape: object
    tensors: object


@dataclass(frozen=True)
class GradientTaken:
    """`tape.gradient(target, sources, *args, **kwargs)` on a traced tape, and its result."""

    tape: object
    target: object
    sources: object
    args: tuple
    kwargs: dict
    result: object


@dataclass(frozen=True)
class CustomGradient:
    """An operation recorded on the tapes with its own backward function
    (`tf.custom_gradient`, a `tf.function` called eagerly)."""

    op_type: str
    outputs: tuple
    inputs: tuple
    backward_function: object
    forward_function: object


class EagerTrace:
    """The entries of one traced step, in the order they happened."""

    def __init__(self) -> None:
        self.entries: list = []
        self.tapes: set[int] = set()  # ids of the tapes opened in this trace
        self.closed = False  # an update has taken it: nothing more is added
        self.dropped = False  # too long, or noting went wrong: it cannot be replayed
        self.gradients = 0  # traced `tape.gradient` calls
        self.updates = 0  # updates that took this trace
        self._paused = 0  # depth of traced `tape.gradient` calls running now
        self._listening = False

    # -- the op callback ---------------------------------------------------------
    def on_op(self, op_type, inputs, attrs, outputs, op_name=None, graph=None):
        """Note one eagerly executed op (ops traced into a graph belong to a function)."""
        if graph is not None:
            return None
        try:
            if isinstance(op_type, bytes):  # ops run by TensorFlow's slow eager path
                op_type = op_type.decode()
            stopped = pywrap_tfe.TFE_Py_TapeSetIsStopped()
            taped = not pywrap_tfe.TFE_Py_TapeSetIsEmpty() and not stopped
            # Where the op ran, worked out as the replay's recorder does for an op it sees.
            layer = keras_layer_path()
            source, kind = _op_site(layer)
            self.add(
                TracedOp(op_type, attrs, tuple(inputs), tuple(outputs), taped, layer, source, kind)
            )
        except Exception as error:  # never let the doctor's notes break the user's step
            self.drop(error)
        return None

    # -- entries -------------------------------------------------------------------
    def add(self, entry) -> None:
        """Append one entry; past `MAX_ENTRIES` the trace is dropped."""
        if self.closed:
            return
        if len(self.entries) >= MAX_ENTRIES:
            self.drop()
            return
        self.entries.append(entry)

    def drop(self, error: Exception | None = None) -> None:
        """Give the trace up (it grew too long, or noting an entry failed with `error`)."""
        if error is not None:
            _warn_once(error)
        self.dropped = True
        self.entries.clear()
        self.close()

    @property
    def noting_ops(self) -> bool:
        """True while eager ops are being noted (open, and no traced gradient running)."""
        return not self.closed and self._paused == 0

    def pause(self) -> None:
        """Stop noting ops while a traced `tape.gradient` runs (calls may nest)."""
        self._paused += 1
        self.listen()

    def resume(self) -> None:
        """Undo one `pause`."""
        self._paused -= 1
        self.listen()

    def close(self) -> None:
        """Stop for good: the step's update has been reached."""
        self.closed = True
        self.listen()

    def listen(self) -> None:
        """Add or remove the op callback, so that ops are noted exactly while `noting_ops`."""
        on = self.noting_ops
        if on == self._listening:
            return
        self._listening = on
        if on:
            op_callbacks.add_op_callback(self.on_op)
        else:
            op_callbacks.remove_op_callback(self.on_op)

    def produced(self, tensors) -> bool:
        """True when every tensor in `tensors` (None allowed) was made inside this trace."""
        made = set()
        for entry in self.entries:
            if isinstance(entry, TracedOp):
                made.update(id(t) for t in entry.outputs)
            elif isinstance(entry, GradientTaken):
                made.update(id(t) for t in _flat(entry.result))
        return all(id(t) in made for t in _flat(tensors))


# `op_site`'s answer for an op depends only on the user's frame that ran it (its code
# and instruction) and on the Keras layers being called around it, and it is asked
# once per op of every traced step: memoized on those. The layers are held weakly,
# so that a layer made later at the same address is never taken for an earlier one.
_sites: dict[tuple, tuple] = {}
_MAX_SITES = 4096


def _op_site(layer: str | None) -> tuple[SourceLine | None, str]:
    """`creation_sites.op_site(layer)` for the op being noted, memoized."""
    frame = user_frame(sys._getframe(1))
    if frame is None:
        return op_site(layer)
    stack = global_state.get_global_attribute("name_scope_stack", default=None) or ()
    callers = tuple(entry.caller for entry in stack)
    code = frame.f_code
    # By identity: hashing a code object hashes its bytecode.
    key = (id(code), frame.f_lasti, tuple(map(id, callers)))
    found = _sites.get(key)
    if (
        found is not None
        and found[0] is code
        and all((r() if r is not None else None) is c for r, c in zip(found[1], callers))
    ):
        return found[2]
    site = op_site(layer)
    if len(_sites) >= _MAX_SITES:
        _sites.clear()
    _sites[key] = (code, tuple(_weak(caller) for caller in callers), site)
    return site


def _weak(obj):
    if obj is None:
        return None
    try:
        return weakref.ref(obj)
    except TypeError:  # not weakly referenceable: the entry never matches again
        return lambda: _NEVER


_NEVER = object()


def _flat(structure) -> list:
    """The tensors in a nest, composite ones (IndexedSlices) with their components."""
    items = tf.nest.flatten(structure)
    parts = tf.nest.flatten(structure, expand_composites=True)
    return [t for t in items + parts if t is not None]


_local = threading.local()


def _enabled() -> bool:
    return getattr(_local, "enabled", False)


def current() -> EagerTrace | None:
    """The trace of the step in progress on this thread (open or closed), or None."""
    return getattr(_local, "trace", None)


def _recording() -> EagerTrace | None:
    trace = current()
    return trace if trace is not None and not trace.closed else None


def enable() -> None:
    """Trace inline eager steps on this thread from now on (`gradient-doctor run`)."""
    record.record_operation = _record_operation
    _local.enabled = True


def disable() -> None:
    """Stop tracing and drop any trace (the run is over)."""
    trace = current()
    if trace is not None:
        trace.close()
    _local.trace = None
    _local.enabled = False


def tape_opened(tape) -> None:
    """A tape is being entered: in plain eager code, the step (if not yet traced) starts."""
    if not _enabled() or not tf.executing_eagerly():
        return
    if step_context.current_recorder() is not None or step_context.current_scope() is not None:
        return  # a replay, or a step the doctor calls and can call again
    trace = _recording()
    if trace is None:
        trace = _local.trace = EagerTrace()
    try:
        trace.tapes.add(id(tape))
        trace.add(TapeOpened(tape, *tape_flags(tape)[:2]))
        trace.listen()
    except Exception as error:  # never let the doctor's notes break the user's step
        trace.drop(error)


def _traced(tape) -> EagerTrace | None:
    trace = _recording()
    return trace if trace is not None and id(tape) in trace.tapes else None


def tape_closed(tape) -> None:
    """A tape is being exited."""
    trace = _traced(tape)
    if trace is not None:
        trace.add(TapeClosed(tape))


def tape_watched(tape, tensors) -> None:
    """`tape.watch(tensors)` is being called."""
    trace = _traced(tape)
    if trace is not None:
        trace.add(TapeWatched(tape, tensors))


_warned = False


def _warn_once(error: Exception) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    warnings.warn(
        f"gradient-doctor stopped tracing an eager step ({type(error).__name__}: {error}); "
        "if one fails, it is reported without its op.",
        stacklevel=3,
    )


def gradient(tape, original, target, sources, *args, **kwargs):
    """`original(tape, target, sources, ...)` (the tape's `gradient`); on a traced tape
    the call and its result are noted, the backward pass's ops are not."""
    trace = _traced(tape)
    if trace is None:
        return original(tape, target, sources, *args, **kwargs)
    trace.pause()
    try:
        result = original(tape, target, sources, *args, **kwargs)
    finally:
        trace.resume()
    trace.add(GradientTaken(tape, target, sources, args, kwargs, result))
    trace.gradients += 1
    return result


def take() -> EagerTrace | None:
    """The trace of the step whose update is being made now, closed; None when there is
    none (no tape was opened in plain eager code, or the trace was dropped).

    A second update before the next tape opens (a GAN's two optimizers applied one
    after the other) gets the same trace.
    """
    trace = current()
    if trace is None:
        return None
    trace.close()
    trace.updates += 1
    return None if trace.dropped else trace


def release(trace: EagerTrace | None) -> None:
    """Let go of `trace` once its update has been checked, when no later update can
    need it (as many updates as traced gradients): the step's tensors are then freed
    before the next step, as without the doctor, not when its tape opens."""
    if trace is not None and current() is trace and trace.updates >= trace.gradients:
        _local.trace = None


_original_record_operation = record.record_operation


@functools.wraps(_original_record_operation)
def _record_operation(op_type, output_tensors, input_tensors, backward_function, *args, **kw):
    """`record.record_operation` (how custom gradients reach the tapes), noted while a
    step is traced; outside one it only forwards."""
    trace = _recording()
    if trace is not None and trace.noting_ops:
        forward_function = args[0] if args else kw.get("forward_function")
        trace.add(
            CustomGradient(
                op_type,
                tuple(output_tensors),
                tuple(input_tensors),
                backward_function,
                forward_function,
            )
        )
    return _original_record_operation(
        op_type, output_tensors, input_tensors, backward_function, *args, **kw
    )
